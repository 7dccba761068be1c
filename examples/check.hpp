// examples/check.hpp — what every example shares: a check that prints and counts, a
// deterministic pseudo-random matrix (so the printed output is the same on every machine), and
// the flag parser that lets the reader change an example's sizes (example::Flags).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

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

/// printf into a std::string (for check texts that name the sizes in use).
inline std::string fmt(const char* format, ...) {
  va_list ap, ap2;
  va_start(ap, format);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, format, ap);
  va_end(ap);
  std::string out(static_cast<std::size_t>(n > 0 ? n : 0), '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, ap2);
  va_end(ap2);
  return out;
}

/// An integer with thousands separators: 67108864 → "67,108,864".
inline std::string grouped(long long v) {
  std::string d = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i != 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return v < 0 ? "-" + out : out;
}

/// The sizes an example lets the reader change, as flags with the example's own values as
/// defaults: `--name value` (or `--name=value`) for integers and reals, `--name` alone for a
/// switch. An unknown flag or a bad value prints one line on stderr and exits 2; `--help` lists
/// the flags with their defaults and exits 0.
///
///   Index T = 8, h = 8;
///   int P = 4;
///   example::Flags("03_mlp_f_g", argc, argv, {{"tokens", &T}, {"hidden", &h}, {"tp", &P}});
class Flags {
 public:
  using Target = std::variant<int*, long*, long long*, double*, bool*>;
  struct Flag {
    const char* name;
    Target target;
  };

  Flags(const char* program, int argc, char** argv, std::initializer_list<Flag> flags)
      : program_(program), flags_(flags) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        usage();
        std::exit(0);
      }
      std::string value;
      bool has_value = false;
      if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
        value = arg.substr(arg.find('=') + 1);
        arg = arg.substr(0, arg.find('='));
        has_value = true;
      }
      const Flag* f = find(arg);
      if (f == nullptr) fail("unknown flag " + arg + " (valid: " + names() + ")");
      if (std::holds_alternative<bool*>(f->target)) {
        if (has_value) fail(arg + " is a switch and takes no value");
        *std::get<bool*>(f->target) = true;
        continue;
      }
      if (!has_value) {
        if (i + 1 >= argc) fail(arg + " needs a value");
        value = argv[++i];
      }
      set(*f, arg, value);
    }
  }

  /// Stop with "NAME: message" on stderr and exit status 2 (for sizes that do not fit together).
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", program_, message.c_str());
    std::exit(2);
  }
  /// fail(message) unless ok.
  void require(bool ok, const std::string& message) const {
    if (!ok) fail(message);
  }

 private:
  const Flag* find(const std::string& arg) const {
    if (arg.rfind("--", 0) != 0) return nullptr;
    for (const auto& f : flags_)
      if (arg.compare(2, std::string::npos, f.name) == 0) return &f;
    return nullptr;
  }
  std::string names() const {
    std::string s;
    for (const auto& f : flags_) s += (s.empty() ? "--" : " --") + std::string(f.name);
    return s.empty() ? "none" : s;
  }
  void set(const Flag& f, const std::string& arg, const std::string& value) const {
    const char* b = value.c_str();
    char* end = nullptr;
    errno = 0;
    if (std::holds_alternative<double*>(f.target)) {
      const double v = std::strtod(b, &end);
      if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(v))
        fail("bad value '" + value + "' for " + arg + " (a number)");
      *std::get<double*>(f.target) = v;
      return;
    }
    const long long v = std::strtoll(b, &end, 10);
    if (value.empty() || *end != '\0' || errno != 0 || v < 1 || v > (1LL << 40))
      fail("bad value '" + value + "' for " + arg + " (a positive integer)");
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, double> || std::is_same_v<T, bool>) {
          } else {
            if (v > static_cast<long long>(std::numeric_limits<T>::max()))
              fail("bad value '" + value + "' for " + arg + " (too large)");
            *p = static_cast<T>(v);
          }
        },
        f.target);
  }
  void usage() const {
    std::printf("usage: %s", program_);
    for (const auto& f : flags_) {
      std::string d;
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool>) d = "";
            else if constexpr (std::is_same_v<T, double>) d = fmt(" %g", *p);
            else d = " " + std::to_string(*p);
          },
          f.target);
      std::printf(" [--%s%s]", f.name, d.c_str());
    }
    std::printf("\n");
  }

  const char* program_;
  std::vector<Flag> flags_;
};

}  // namespace example
