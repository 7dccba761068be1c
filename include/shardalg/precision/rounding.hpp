// shardalg/precision/rounding.hpp — the unit roundoff of each floating-point format and the
// constant γ_k = k·u / (1 − k·u) of the standard model of rounding (Higham, "Accuracy and
// Stability of Numerical Algorithms", §2.2 and Lemma 3.1).
//
// The model: every basic operation ∘ ∈ {+, −, ×, ÷, √} on two numbers of a format with unit
// roundoff u returns fl(x ∘ y) = (x ∘ y)(1 + δ) with |δ| ≤ u (round to nearest, no underflow or
// overflow); converting a value to a narrower format multiplies it by (1 + δ), |δ| ≤ u of the
// narrower one. A product of k such factors (1 + δ_i)^±1 is 1 + θ_k with |θ_k| ≤ γ_k. The
// formats and their u (round to nearest, p significand bits: u = 2^−p):
//
//   f64 (double)          p = 53   u = 2^−53 ≈ 1.11e−16
//   f32 (float)           p = 24   u = 2^−24 ≈ 5.96e−8
//   f16 (IEEE half)       p = 11   u = 2^−11 ≈ 4.88e−4
//   bf16 (bfloat16)       p = 8    u = 2^−8  ≈ 3.91e−3
//
// Underflow: a value rounded into the subnormal range has an absolute error of at most η, half the
// smallest subnormal (f32 2^−150, f16 2^−25, bf16 2^−134; for f64 2^−1074 is used). The final
// rounding to storage is modelled as fl(x) = x(1 + δ) + η' with |δ| ≤ u, |η'| ≤ η (Higham §2.1),
// so outputs that underflow are covered; the intermediate operations in the accumulation format
// are assumed not to underflow or overflow.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <limits>
#include <string_view>

#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg::precision {

/// A bound that does not exist: γ_k with k·u ≥ 1, a format without a unit roundoff (an integer
/// type), a division by a quantity whose error bound is as large as itself. The message names the
/// values.
struct PrecisionError : Error {
  using Error::Error;
};

/// The floating-point formats a bound speaks of: the storage and accumulation types of an op.
enum class Format { f64, f32, f16, bf16 };


constexpr std::string_view to_string(Format f) {
  switch (f) {
    case Format::f64: return "f64";
    case Format::f32: return "f32";
    case Format::f16: return "f16";
    case Format::bf16: return "bf16";
  }
  return "?";
}

/// Significand bits p (the hidden bit included) of a format.
constexpr int significand_bits(Format f) {
  switch (f) {
    case Format::f64: return 53;
    case Format::f32: return 24;
    case Format::f16: return 11;
    case Format::bf16: return 8;
  }
  return 0;
}

/// The unit roundoff u = 2^−p of a format (round to nearest).
constexpr double unit_roundoff(Format f) {
  double u = 1.0;
  for (int i = 0; i < significand_bits(f); ++i) u /= 2.0;
  return u;
}

/// η: the largest absolute error of rounding a value into the subnormal range of a format, half
/// its smallest subnormal (2^−1074 for f64, whose half is not a double).
constexpr double underflow_unit(Format f) {
  int e = 0;
  switch (f) {
    case Format::f64: e = 1074; break;
    case Format::f32: e = 150; break;
    case Format::f16: e = 25; break;
    case Format::bf16: e = 134; break;
  }
  double x = 1.0;
  for (int i = 0; i < e; ++i) x /= 2.0;
  return x;
}

/// Whether every value of `narrow` is a value of `wide` (a conversion narrow → wide is exact).
constexpr bool contains(Format wide, Format narrow) {
  if (wide == narrow) return true;
  if (wide == Format::f64) return true;
  if (wide == Format::f32) return narrow == Format::f16 || narrow == Format::bf16;
  return false;
}

/// The unit roundoff of rounding a result held in `from` to `to`: 0 when `to` holds every value
/// of `from` (no rounding happens), else u(to).
constexpr double rounding_to(Format to, Format from) { return contains(to, from) ? 0.0 : unit_roundoff(to); }

/// The format of a C++ element type: double, float, Eigen::half, Eigen::bfloat16.
template <class T> struct format_of_t;
template <> struct format_of_t<double> { static constexpr Format value = Format::f64; };
template <> struct format_of_t<float> { static constexpr Format value = Format::f32; };
template <> struct format_of_t<Eigen::half> { static constexpr Format value = Format::f16; };
template <> struct format_of_t<Eigen::bfloat16> { static constexpr Format value = Format::bf16; };
template <class T> inline constexpr Format format_of = format_of_t<T>::value;

/// The unit roundoff of a C++ floating-point element type.
template <class T> inline constexpr double unit_roundoff_v = unit_roundoff(format_of<T>);

/// The format of a runtime element tag; an integer tag has no unit roundoff: PrecisionError.
inline Format format_of_dtype(DType t) {
  switch (t) {
    case DType::f64: return Format::f64;
    case DType::f32: return Format::f32;
    case DType::f16: return Format::f16;
    case DType::bf16: return Format::bf16;
    default: break;
  }
  throw PrecisionError(shardalg::detail::cat("precision: ", shardalg::to_string(t),
                                   " is an integer type; a rounding bound needs f64, f32, f16 or bf16"));
}

/// γ_k = k·u / (1 − k·u): |θ_k| ≤ γ_k for a product of k factors (1 + δ_i)^±1, |δ_i| ≤ u.
/// γ_0 = 0. Defined only while k·u < 1; otherwise a PrecisionError naming k and u.
inline double gamma(std::int64_t k, double u) {
  if (k < 0) throw PrecisionError(shardalg::detail::cat("precision: gamma(k = ", k, ", u = ", u, "): k must be ≥ 0"));
  const double ku = static_cast<double>(k) * u;
  if (!(ku < 1.0))
    throw PrecisionError(shardalg::detail::cat("precision: gamma(k = ", k, ", u = ", u, "): k·u = ", ku,
                                     " ≥ 1, so no bound of the form k·u/(1 − k·u) exists"));
  return ku / (1.0 - ku);
}
/// γ_k of a format.
inline double gamma(std::int64_t k, Format f) { return gamma(k, unit_roundoff(f)); }

/// The storage and accumulation formats of an op: operands stored in `storage`, every
/// intermediate operation (product, sum, exp, division) rounded in `accumulate`, the result
/// rounded once to `storage`. {f32, f32} is an fp32 op, {bf16, f32} bf16 storage with fp32
/// accumulation (CpuBackend::gemm on Eigen::bfloat16).
struct Types {
  Format storage = Format::f32;
  Format accumulate = Format::f32;

  /// u of the intermediate operations.
  constexpr double u_acc() const { return unit_roundoff(accumulate); }
  /// u of the final rounding to storage: 0 when storage holds every accumulate value.
  constexpr double u_out() const { return rounding_to(storage, accumulate); }
  /// η of the final rounding to storage: 0 when no rounding happens.
  constexpr double eta_out() const { return contains(storage, accumulate) ? 0.0 : underflow_unit(storage); }
};

}  // namespace shardalg::precision
