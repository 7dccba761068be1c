// tests/precision/lowp.hpp — what the precision tests share: values rounded to a storage type,
// the reference format, seeded operands of several scales and sign patterns, and a tally of
// error/bound ratios pooled over cases.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/precision/bounds.hpp"

namespace lowp {

namespace sp = shardalg::precision;
using sp::Format;
using sp::Types;
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
template <class R>
using RMat = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;

template <class T>
inline constexpr bool half_v = std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>;

/// A double rounded to storage S (through float for the 16-bit types: the generated inputs only
/// need to be values of S).
template <class S>
S store(double x) {
  if constexpr (half_v<S>) return S(static_cast<float>(x));
  else return static_cast<S>(x);
}
template <class T>
double dbl(T x) {
  if constexpr (half_v<T>) return static_cast<double>(static_cast<float>(x));
  else return static_cast<double>(x);
}
/// An accumulate-format value rounded once to storage S.
template <class S, class Acc>
double to_storage(Acc x) {
  return dbl(static_cast<S>(x));
}

/// The reference format: long double for double ops, double for the others.
template <class Acc>
using Ref = std::conditional_t<std::is_same_v<Acc, double>, long double, double>;

enum class Signs { mixed, positive, wide };

/// A [r, c] matrix of values of S: mixed signs uniform in [−scale, scale), positive in
/// [0, scale), or wide (random signs, magnitudes log-uniform over scale·[2^−6, 2^6]).
template <class S>
Mat random_stored(Eigen::Index r, Eigen::Index c, double scale, Signs s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Mat m(r, c);
  for (Eigen::Index j = 0; j < c; ++j)
    for (Eigen::Index i = 0; i < r; ++i) {
      double x = u(gen);
      if (s == Signs::positive) x = std::abs(x);
      if (s == Signs::wide) x = (x < 0 ? -1.0 : 1.0) * std::exp2(6.0 * u(gen));
      m(i, j) = dbl(store<S>(scale * x));
    }
  return m;
}

/// error/bound ratios pooled over the cases of one op and one pair of types.
struct Tally {
  explicit Tally(std::string n) : name(std::move(n)) {}
  std::string name;
  std::vector<double> ratios;
  double max = 0;
  void add(const Mat& r) {
    ratios.insert(ratios.end(), r.data(), r.data() + r.size());
    if (r.size()) max = std::max(max, r.maxCoeff());
  }
  double median() const {
    Mat m = Eigen::Map<const Mat>(ratios.data(), static_cast<Eigen::Index>(ratios.size()), 1);
    return sp::median_ratio(m);
  }
  void print() const { std::printf("  %-34s elements %8zu  median %.3g  max %.3g\n", name.c_str(), ratios.size(), median(), max); }
};

}  // namespace lowp
