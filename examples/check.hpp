// examples/check.hpp — what every example shares: a check that prints and counts, and a
// deterministic pseudo-random matrix (so the printed output is the same on every machine).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <Eigen/Core>

namespace example {

inline int failures = 0;

/// Print the check and remember a failure; the example's exit status comes from finish().
inline bool check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
  return ok;
}

/// |a − b| ≤ rel · max(|a|, |b|).
inline bool close(double a, double b, double rel = 1e-9) {
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

inline int finish(const char* name) {
  if (failures != 0) {
    std::printf("\n%s: %d check(s) FAILED\n", name, failures);
    return 1;
  }
  std::printf("\n%s: all checks passed\n", name);
  return 0;
}

/// A splitmix64 step: the same stream on every platform (std::*_distribution is not portable).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A rows × cols row-major matrix of values in [-1, 1), a function of (seed, row, col) only.
inline Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> matrix(Eigen::Index rows,
                                                                                     Eigen::Index cols,
                                                                                     std::uint64_t seed) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) {
      const std::uint64_t u = splitmix64(seed * 0x100000001b3ULL ^ static_cast<std::uint64_t>(i * cols + j));
      m(i, j) = static_cast<double>(u >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
  return m;
}

/// GeLU, tanh form, and its derivative.
inline double gelu(double x) {
  const double k = 0.7978845608028654;  // √(2/π)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double gelu_grad(double x) {
  const double k = 0.7978845608028654;
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace example
