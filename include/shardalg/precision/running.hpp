// shardalg/precision/running.hpp — a running error bound: a scalar that carries, beside the exact
// value of a quantity, a bound on how far a program computing it in a floating-point format with
// unit roundoff u can be from it. Evaluate any algorithm written generically in its scalar (the
// dense twins of reference/dense_layers.hpp are) over Running<Format> and every tensor it produces,
// forward and backward, comes with its bound: the bounds of precision/bounds.hpp propagated
// through the program op by op, with no per-layer derivation.
//
// A Running x holds v (the exact value, in double), e and, while x is a sum not yet consumed by
// another op, a and n:
//
//   x is a sum of n terms t_i (an open sum), each computed with error ≤ e_i, e = Σ e_i,
//   a = Σ (|t_i| + e_i) ≥ Σ |t̂_i|. Summed in any order (any tree, with or without FMA, split
//   between ranks and added again), each add rounds a partial sum of magnitude ≤ a, so
//       |x̂ − x| ≤ E(x) = e + γ_{n−1}·a                       (Higham, eq. (3.5))
//   An op other than + and − closes its operands (uses E) and starts a new term (n = 1).
//
// The rules, exact value v and closed bounds E_x, E_y of the operands, u of the format:
//   x ± y        v_x ± v_y;  e, a, n add (the sum stays open); an exact 0 is not a term
//   x · y        d = |v_x|E_y + |v_y|E_x + E_x·E_y,  E = d + u(|v| + d); times an exact ±2^k:
//                every term scaled, the sum still open
//   x / y        d = (E_x + |v|·E_y) / (|v_y| − E_y),  E = d + γ_2(|v| + d)
//                (two roundings: x times a rounded 1/y is covered; E_y < |v_y| or PrecisionError)
//   √x           d = E_x / (√v_x + √max(0, v_x − E_x)),  E = d + u(|v| + d)
//   exp x        d = e^{v_x}(e^{E_x} − 1),  E = d + r(|v| + d)
//   log x        d = −log(1 − E_x/v_x),  E = d + r(|v| + d)   (E_x < v_x or PrecisionError)
//   tanh, cosh, erf, erfc: d = E_x · max |f'| on [v_x − E_x, v_x + E_x],  E = d + r(|v| + d)
//   |x|, max, min: no rounding;  E = E_x (max/min: the larger of the two)
//   a constant c   E = 0 when c is a value of the format, else u|c| (it is rounded to the format)
// r is the relative error of the library's exp, log, tanh, cosh and erfc: `function_ulps` units of
// u (default 4: two ulps). Every rule is rigorous, second-order terms included; the bound covers
// any program that performs the same operations on the same terms — the dense twin's algorithm,
// in any summation order, with its sums split across ranks — and one that performs fewer
// roundings (an FMA, a product kept in a wider register). A program that stores its tensors in a
// narrower format (bf16 storage, fp32 arithmetic) says so with a StorageScope: the dense twins
// round each tensor they materialise to it (storage_round), and each contraction that tensor
// parallelism splits across ranks as its all-reduce does (partial_round); round_to rounds one value.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "shardalg/base/errors.hpp"
#include "shardalg/precision/rounding.hpp"

namespace shardalg::precision {

/// The program a Running bounds, beyond its format F: where it stores tensors narrower than it
/// computes them (`storage`; none: every tensor kept in F) and over how many tensor-parallel ranks
/// a split contraction is reduced (`tp`; each rank's partial rounded to storage, then added in rank
/// order, each add rounded: ThreadComm's and MpiComm's 16-bit all_reduce). Set for a scope on
/// this thread with StorageScope; the dense twins read it where they store and reduce.
struct Storage {
  std::optional<Format> format;
  int tp = 1;
};
inline Storage& current_storage() {
  static thread_local Storage s;
  return s;
}
class StorageScope {
 public:
  explicit StorageScope(Storage s) : saved_(current_storage()) { current_storage() = s; }
  ~StorageScope() { current_storage() = saved_; }
  StorageScope(const StorageScope&) = delete;
  StorageScope& operator=(const StorageScope&) = delete;

 private:
  Storage saved_;
};

template <Format F>
class Running {
 public:
  static constexpr double u = unit_roundoff(F);
  static constexpr bool own_math = true;  // exp, erf, tanh … below, found by ADL (base/functors.hpp)
  /// The relative error of exp, log, tanh, cosh and erfc, in units of u.
  static constexpr double function_ulps = 4.0;

  /// A constant of the program (a weight, an input, a literal): exact if the format holds it,
  /// otherwise rounded to the format once.
  Running(double c = 0.0) : v_(c), e_(representable(c) ? 0.0 : u * std::abs(c)), a_(std::abs(c) + e_) {}  // NOLINT: implicit
  /// A value known to within `err` (a computed input): closed, one term.
  static Running with_error(double value, double err) { return closed(value, err); }

  [[nodiscard]] double value() const { return v_; }
  /// E: the bound on |computed − value| (the open sum closed).
  [[nodiscard]] double bound() const { return e_ + (n_ > 1 ? gamma(n_ - 1, u) * a_ : 0.0); }
  /// Terms of the open sum (1 for anything but a sum).
  [[nodiscard]] std::int64_t terms() const { return n_; }

  friend Running operator+(const Running& x, const Running& y) { return sum(x, y, 1.0); }
  friend Running operator-(const Running& x, const Running& y) { return sum(x, y, -1.0); }
  friend Running operator-(const Running& x) {
    Running r = x;
    r.v_ = -x.v_;
    return r;
  }
  friend Running operator*(const Running& x, const Running& y) {
    if (exact_power_of_two(y)) return scaled(x, y.v_);
    if (exact_power_of_two(x)) return scaled(y, x.v_);
    const double ex = x.bound(), ey = y.bound(), v = x.v_ * y.v_;
    const double d = std::abs(x.v_) * ey + std::abs(y.v_) * ex + ex * ey;
    return closed(v, d + u * (std::abs(v) + d));
  }
  friend Running operator/(const Running& x, const Running& y) {
    const double ex = x.bound(), ey = y.bound(), v = x.v_ / y.v_;
    if (!(ey < std::abs(y.v_)))
      throw PrecisionError(shardalg::detail::cat("precision::Running: a divisor ", y.v_, " whose error bound ", ey,
                                                 " is not below its magnitude"));
    const double d = (ex + std::abs(v) * ey) / (std::abs(y.v_) - ey);
    return closed(v, d + gamma(2, u) * (std::abs(v) + d));
  }
  Running& operator+=(const Running& y) { return *this = *this + y; }
  Running& operator-=(const Running& y) { return *this = *this - y; }
  Running& operator*=(const Running& y) { return *this = *this * y; }
  Running& operator/=(const Running& y) { return *this = *this / y; }

  // Comparisons look at the exact values: the program is assumed to take the same branch.
  friend bool operator<(const Running& x, const Running& y) { return x.v_ < y.v_; }
  friend bool operator>(const Running& x, const Running& y) { return x.v_ > y.v_; }
  friend bool operator<=(const Running& x, const Running& y) { return x.v_ <= y.v_; }
  friend bool operator>=(const Running& x, const Running& y) { return x.v_ >= y.v_; }
  friend bool operator==(const Running& x, const Running& y) { return x.v_ == y.v_; }
  friend bool operator!=(const Running& x, const Running& y) { return x.v_ != y.v_; }

  friend Running abs(const Running& x) { return closed(std::abs(x.v_), x.bound()); }
  friend Running max(const Running& x, const Running& y) {
    return closed(std::max(x.v_, y.v_), std::max(x.bound(), y.bound()));
  }
  friend Running min(const Running& x, const Running& y) {
    return closed(std::min(x.v_, y.v_), std::max(x.bound(), y.bound()));
  }
  friend Running sqrt(const Running& x) {
    const double ex = x.bound(), v = std::sqrt(x.v_);
    const double d = ex / (v + std::sqrt(std::max(0.0, x.v_ - ex)));
    return closed(v, d + u * (v + d));
  }
  friend Running exp(const Running& x) {
    const double ex = x.bound(), v = std::exp(x.v_);
    return function(v, v * std::expm1(ex));
  }
  friend Running log(const Running& x) {
    const double ex = x.bound();
    if (!(ex < x.v_))
      throw PrecisionError(shardalg::detail::cat("precision::Running: log of ", x.v_, " whose error bound ", ex,
                                                 " is not below it"));
    return function(std::log(x.v_), -std::log1p(-ex / x.v_));
  }
  friend Running tanh(const Running& x) {
    const double ex = x.bound(), lo = std::max(0.0, std::abs(x.v_) - ex), s = 1.0 / std::cosh(lo);
    return function(std::tanh(x.v_), ex * s * s);
  }
  friend Running cosh(const Running& x) {
    const double ex = x.bound();
    return function(std::cosh(x.v_), ex * std::sinh(std::abs(x.v_) + ex));
  }
  /// A tensor stored: rounded to the current storage format (nothing when there is none, or it
  /// holds every value of F).
  friend Running storage_round(const Running& x) {
    const auto& st = current_storage();
    if (!st.format || contains(*st.format, F)) return x;
    const double e = x.bound(), us = unit_roundoff(*st.format);
    return closed(x.v_, e + us * (std::abs(x.v_) + e) + underflow_unit(*st.format));
  }
  /// A contraction split over tp ranks and all-reduced in the storage format: each rank's partial
  /// p_r rounded (u_s), the P partials added in rank order with each add rounded (ε = (1 + u)(1 +
  /// u_s) − 1): E + (u_s + (1 + u_s)·γ_{P−1}(ε))·(a + E) + P·η, a = Σ|terms| ≥ Σ_r |p_r|. Nothing
  /// for one rank or no narrower storage: the open sum already covers any split of its terms.
  friend Running partial_round(const Running& x) {
    const auto& st = current_storage();
    if (st.tp <= 1 || !st.format || contains(*st.format, F)) return x;
    const double e = x.bound(), us = unit_roundoff(*st.format), eps = (1.0 + u) * (1.0 + us) - 1.0;
    const double c = us + (1.0 + us) * gamma(st.tp - 1, eps);
    return closed(x.v_, e + c * (x.a_ + e) + st.tp * underflow_unit(*st.format));
  }
  friend Running erf(const Running& x) {
    const double ex = x.bound(), lo = std::max(0.0, std::abs(x.v_) - ex);
    return function(std::erf(x.v_), ex * 2.0 / std::sqrt(3.14159265358979323846) * std::exp(-lo * lo));
  }
  friend Running erfc(const Running& x) {
    const double ex = x.bound(), lo = std::max(0.0, std::abs(x.v_) - ex);
    return function(std::erfc(x.v_), ex * 2.0 / std::sqrt(3.14159265358979323846) * std::exp(-lo * lo));
  }

 private:
  double v_ = 0, e_ = 0, a_ = 0;
  std::int64_t n_ = 1;

  static bool representable(double c) {
    if constexpr (F == Format::f64) return true;
    else if constexpr (F == Format::f32) return static_cast<double>(static_cast<float>(c)) == c || !std::isfinite(c);
    else if constexpr (F == Format::bf16)
      return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(c)))) == c;
    else return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(c)))) == c;
  }
  /// ±2^k held exactly: a product by it rounds nothing (no underflow or overflow assumed).
  static bool exact_power_of_two(const Running& c) {
    if (c.e_ != 0.0 || c.n_ != 1 || c.v_ == 0.0 || !std::isfinite(c.v_)) return false;
    int ex = 0;
    return std::abs(std::frexp(c.v_, &ex)) == 0.5;
  }
  /// x times an exact power of two: every term scaled, the sum still open.
  static Running scaled(const Running& x, double c) {
    Running r = x;
    r.v_ = x.v_ * c;
    r.e_ = x.e_ * std::abs(c);
    r.a_ = x.a_ * std::abs(c);
    return r;
  }
  static Running closed(double v, double err) {
    Running r;
    r.v_ = v;
    r.e_ = err;
    r.a_ = std::abs(v) + err;
    r.n_ = 1;
    return r;
  }
  /// A library function's result v with propagated error d, rounded with relative error r.
  static Running function(double v, double d) { return closed(v, d + function_ulps * u * (std::abs(v) + d)); }
  /// An exact zero: adding it rounds nothing (an accumulator's initial value is not a term).
  bool exact_zero() const { return v_ == 0.0 && e_ == 0.0 && n_ == 1; }
  static Running sum(const Running& x, const Running& y, double sign) {
    if (y.exact_zero()) return x;
    if (x.exact_zero()) return sign > 0 ? y : -y;
    Running r;
    r.v_ = x.v_ + sign * y.v_;
    r.e_ = x.e_ + y.e_;
    r.a_ = x.a_ + y.a_;
    r.n_ = x.n_ + y.n_;
    return r;
  }
};

/// The value held in `storage` after rounding a value computed in F (a tensor stored narrower than
/// it is computed): E' = E + u_s(|v| + E) + η_s, where u_s is 0 when storage holds every value of F.
template <Format F>
Running<F> round_to(const Running<F>& x, Format storage) {
  const double e = x.bound(), us = rounding_to(storage, F);
  const double eta = contains(storage, F) ? 0.0 : underflow_unit(storage);
  return Running<F>::with_error(x.value(), e + us * (std::abs(x.value()) + e) + eta);
}

/// Elementwise value and bound of a matrix of Running.
template <class Derived>
Eigen::MatrixXd values(const Eigen::MatrixBase<Derived>& m) {
  return m.unaryExpr([](const auto& x) { return x.value(); });
}
template <class Derived>
Eigen::MatrixXd bounds(const Eigen::MatrixBase<Derived>& m) {
  return m.unaryExpr([](const auto& x) { return x.bound(); });
}

}  // namespace shardalg::precision

namespace Eigen {
template <shardalg::precision::Format F>
struct NumTraits<shardalg::precision::Running<F>> : NumTraits<double> {
  using Real = shardalg::precision::Running<F>;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 4, AddCost = 8, MulCost = 8 };
};
}  // namespace Eigen
