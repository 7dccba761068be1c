// shardalg/precision/element.hpp — the running bound as an element type of the library: a Sharded
// tensor of Running<F> (or Stored<S, F>) runs through the CPU backend, the differentiable ops and
// the thread world's collectives like a tensor of double, and every element it produces carries
// its exact value and a bound on the rounding error of the same program run in the format.
//
//   Running<f64>            the program in double
//   Running<f32>            the program in float
//   Stored<bf16, f32>       the program in bf16 storage with fp32 arithmetic (CpuBackend on
//   Stored<f16, f32>        Eigen::bfloat16 / Eigen::half)
//
// Stored<S, F> is to Running<F> what Eigen::bfloat16 is to float: each of its own operations is
// the Running<F> operation followed by a rounding to S (Eigen's scalar bf16 arithmetic:
// bf16(float(x) ∘ float(y))), and compute_t<Stored<S, F>> = Running<F>, so the CPU backend's
// kernels that widen a 16-bit block to fp32, compute, and round each output once (NarrowStorage,
// base/dtype.hpp) do the same with the bound: no arithmetic is written twice. The thread world's
// all_reduce adds Stored partials in rank order, each add rounded (comm/reduce.hpp's 16-bit model);
// Running partials join one open sum, which covers any order.
//
// A value rounded to S: E' = E + u_S·(|v| + E) + η_S, nothing when E = 0 and S holds v exactly.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "shardalg/base/dtype.hpp"
#include "shardalg/comm/reduce.hpp"
#include "shardalg/precision/rounding.hpp"
#include "shardalg/precision/running.hpp"

namespace shardalg::precision {

/// Whether format f holds the double v exactly.
inline bool holds(Format f, double v) {
  switch (f) {
    case Format::f64: return true;
    case Format::f32: return static_cast<double>(static_cast<float>(v)) == v || !std::isfinite(v);
    case Format::bf16: return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(v)))) == v;
    case Format::f16: return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(v)))) == v;
  }
  return false;
}

/// A value computed in F and stored in the narrower S (see the file's comment).
template <Format S, Format F>
class Stored {
 public:
  using Wide = Running<F>;
  static constexpr double u = unit_roundoff(S);
  static constexpr bool own_math = true;

  /// A constant: exact when S holds it, else rounded to S once.
  Stored(double c = 0.0) : r_(stored(Wide(c))) {}  // NOLINT: implicit, as a literal of the program
  /// A value computed in F, stored: rounded to S.
  explicit Stored(const Wide& x) : r_(stored(x)) {}
  /// Widening to F is exact.
  explicit operator Wide() const { return r_; }

  [[nodiscard]] double value() const { return r_.value(); }
  [[nodiscard]] double bound() const { return r_.bound(); }

  friend Stored operator+(const Stored& x, const Stored& y) { return Stored(x.r_ + y.r_); }
  friend Stored operator-(const Stored& x, const Stored& y) { return Stored(x.r_ - y.r_); }
  friend Stored operator*(const Stored& x, const Stored& y) { return Stored(x.r_ * y.r_); }
  friend Stored operator/(const Stored& x, const Stored& y) { return Stored(x.r_ / y.r_); }
  friend Stored operator-(const Stored& x) { return raw(-x.r_); }  // a sign: exact
  Stored& operator+=(const Stored& y) { return *this = *this + y; }
  Stored& operator-=(const Stored& y) { return *this = *this - y; }
  Stored& operator*=(const Stored& y) { return *this = *this * y; }
  Stored& operator/=(const Stored& y) { return *this = *this / y; }

  friend bool operator<(const Stored& x, const Stored& y) { return x.r_ < y.r_; }
  friend bool operator>(const Stored& x, const Stored& y) { return x.r_ > y.r_; }
  friend bool operator<=(const Stored& x, const Stored& y) { return x.r_ <= y.r_; }
  friend bool operator>=(const Stored& x, const Stored& y) { return x.r_ >= y.r_; }
  friend bool operator==(const Stored& x, const Stored& y) { return x.r_ == y.r_; }
  friend bool operator!=(const Stored& x, const Stored& y) { return x.r_ != y.r_; }

  // Exact in S: |x|, max, min pick or flip a stored value.
  friend Stored abs(const Stored& x) { return raw(abs(x.r_)); }
  friend Stored max(const Stored& x, const Stored& y) { return raw(max(x.r_, y.r_)); }
  friend Stored min(const Stored& x, const Stored& y) { return raw(min(x.r_, y.r_)); }
  friend Stored sqrt(const Stored& x) { return Stored(sqrt(x.r_)); }
  friend Stored exp(const Stored& x) { return Stored(exp(x.r_)); }
  friend Stored log(const Stored& x) { return Stored(log(x.r_)); }
  friend Stored tanh(const Stored& x) { return Stored(tanh(x.r_)); }
  friend Stored cosh(const Stored& x) { return Stored(cosh(x.r_)); }
  friend Stored erf(const Stored& x) { return Stored(erf(x.r_)); }
  friend Stored erfc(const Stored& x) { return Stored(erfc(x.r_)); }

 private:
  Wide r_;

  static Stored raw(const Wide& w) {
    Stored s;
    s.r_ = w;
    return s;
  }
  static Wide stored(const Wide& x) {
    const double e = x.bound(), v = x.value();
    if (e == 0.0 && holds(S, v)) return Wide::with_error(v, 0.0);
    return Wide::with_error(v, e + u * (std::abs(v) + e) + underflow_unit(S));
  }
};

/// f.template operator()<T>() with the C++ element type of a bound_* tag.
template <class Fn>
decltype(auto) dispatch_bound(DType t, Fn&& f) {
  switch (t) {
    case DType::bound_f64: return f.template operator()<Running<Format::f64>>();
    case DType::bound_f32: return f.template operator()<Running<Format::f32>>();
    case DType::bound_bf16: return f.template operator()<Stored<Format::bf16, Format::f32>>();
    case DType::bound_f16: return f.template operator()<Stored<Format::f16, Format::f32>>();
    default: break;
  }
  throw std::invalid_argument(std::string("shardalg: ") + std::string(to_string(t)) + " is not a running bound's element");
}

/// acc[i] := acc[i] ∘ x[i] over the bytes of bound elements (comm/reduce.hpp's hook for ThreadComm).
inline void accumulate_bound(void* acc, const void* x, std::size_t n, DType t, ReduceOp op) {
  dispatch_bound(t, [&]<class T>() {
    for (std::size_t i = 0; i < n; ++i) {
      T a, b;
      std::memcpy(&a, static_cast<const char*>(acc) + i * sizeof(T), sizeof(T));
      std::memcpy(&b, static_cast<const char*>(x) + i * sizeof(T), sizeof(T));
      a = op == ReduceOp::max ? (a < b ? b : a) : op == ReduceOp::min ? (b < a ? b : a) : a + b;
      std::memcpy(static_cast<char*>(acc) + i * sizeof(T), &a, sizeof(T));
    }
  });
}
inline const bool bound_accumulate_registered = (shardalg::detail::extra_accumulate() = &accumulate_bound, true);

/// The bound's element for a program in element type T: Running<f64> for double, Running<f32> for
/// float, Stored<bf16 | f16, f32> for Eigen::bfloat16 | Eigen::half.
template <class T> struct bound_of_t;
template <> struct bound_of_t<double> { using type = Running<Format::f64>; };
template <> struct bound_of_t<float> { using type = Running<Format::f32>; };
template <> struct bound_of_t<Eigen::bfloat16> { using type = Stored<Format::bf16, Format::f32>; };
template <> struct bound_of_t<Eigen::half> { using type = Stored<Format::f16, Format::f32>; };
template <class T> using bound_of = typename bound_of_t<T>::type;

/// Whether T is one of the four bound elements.
template <class T> inline constexpr bool is_bound_element_v = false;
template <Format F> inline constexpr bool is_bound_element_v<Running<F>> = true;
template <Format S, Format F> inline constexpr bool is_bound_element_v<Stored<S, F>> = true;

static_assert(sizeof(Running<Format::f32>) == size_of(DType::bound_f32), "base/dtype.hpp: size_of(bound_*)");
static_assert(sizeof(Stored<Format::bf16, Format::f32>) == size_of(DType::bound_bf16), "base/dtype.hpp: size_of(bound_*)");

}  // namespace shardalg::precision

namespace shardalg {
template <> inline constexpr bool is_element_v<precision::Running<precision::Format::f64>> = true;
template <> inline constexpr bool is_element_v<precision::Running<precision::Format::f32>> = true;
template <> inline constexpr bool is_element_v<precision::Stored<precision::Format::bf16, precision::Format::f32>> = true;
template <> inline constexpr bool is_element_v<precision::Stored<precision::Format::f16, precision::Format::f32>> = true;
template <> inline constexpr DType dtype_of<precision::Running<precision::Format::f64>> = DType::bound_f64;
template <> inline constexpr DType dtype_of<precision::Running<precision::Format::f32>> = DType::bound_f32;
template <> inline constexpr DType dtype_of<precision::Stored<precision::Format::bf16, precision::Format::f32>> = DType::bound_bf16;
template <> inline constexpr DType dtype_of<precision::Stored<precision::Format::f16, precision::Format::f32>> = DType::bound_f16;
template <precision::Format S, precision::Format F>
struct compute_type<precision::Stored<S, F>> {
  using type = precision::Running<F>;
};
}  // namespace shardalg

namespace Eigen {
template <shardalg::precision::Format S, shardalg::precision::Format F>
struct NumTraits<shardalg::precision::Stored<S, F>> : NumTraits<double> {
  using Real = shardalg::precision::Stored<S, F>;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 4, AddCost = 8, MulCost = 8 };
};
}  // namespace Eigen
