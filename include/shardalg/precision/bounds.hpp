// shardalg/precision/bounds.hpp — forward error bounds, element by element, derived from the
// standard model of rounding (precision/rounding.hpp) and the operands' magnitudes: for each op a
// function returning a double matrix B with |computed − exact| ≤ B elementwise, and
// error_over_bound(computed, exact, B) = max |computed − exact| / B (≤ 1 when the bound holds).
//
// The operands are double copies of the stored values (exactly the values the op read). Every op
// is modelled as: operands stored in Types::storage, each intermediate operation rounded in
// Types::accumulate (unit roundoff u), the result rounded once to storage (u_out = u(storage), or
// 0 when storage holds every accumulate value, e.g. an fp32 op). The bounds are rigorous under the
// model, second-order terms included (no "+ O(u²)"), so a computation that follows the model can
// never exceed them; they are worst cases, and a long reduction's typical error is far below
// (√k against k: the measured ratios are in docs/verify.md, "Derived bounds: error ÷ bound").
//
//   product C = A·B, k = A.cols()      |Ĉ − C| ≤ (1 + u_out)·γ_k(u)·|A|·|B| + u_out·|C| + η
//       γ_k covers the k products and k − 1 additions of any summation order, with or without FMA
//       (Higham, eq. (3.5)). Inputs rounded from a wider format first (u_in per operand,
//       product_bound_rounded_inputs): with Â = A∘(1 + Δ), |Δ| ≤ u_in, and c_in = (1 + u_in)² − 1,
//       |Ĉ − A·B| ≤ (1 + u_out)(γ_k(u)(1 + c_in) + c_in)·|A|·|B| + u_out·|A·B| + η.
//   sum of P partials in a fixed order s = x_1 + … + x_P
//       once:      a running sum in accumulate, rounded to storage at the end:
//                  |ŝ − s| ≤ (1 + u_out)·γ_{P−1}(u)·Σ|x_p| + u_out·|s| + η
//       each_add:  each add formed in accumulate and rounded to storage (ThreadComm's 16-bit
//                  all_reduce): per add a factor (1 + δ)(1 + ω), so with ε = (1 + u)(1 + u_out) − 1
//                  |ŝ − s| ≤ γ_{P−1}(ε)·Σ|x_p| + (1 + γ_{P−1}(ε))·(P − 1)·η
//   softmax, layer_norm, rms_norm, gelu_tanh: the models are written above each function.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "shardalg/base/errors.hpp"
#include "shardalg/base/index.hpp"
#include "shardalg/precision/rounding.hpp"

namespace shardalg::precision {

using Matrix = Eigen::MatrixXd;

/// The product C = A·B: stored operands A [m, k], B [k, n]; bound (1 + u_out)·γ_k·|A|·|B| + u_out·|C| + η.
inline Matrix product_bound(const Matrix& A, const Matrix& B, Types t) {
  if (A.cols() != B.rows())
    throw ShapeError(shardalg::detail::cat("precision::product_bound: A is ", A.rows(), "x", A.cols(), ", B is ", B.rows(), "x",
                                 B.cols()));
  const double g = gamma(A.cols(), t.u_acc()), uo = t.u_out();
  const Matrix absAB = A.cwiseAbs() * B.cwiseAbs();
  const Matrix C = A * B;
  return ((1.0 + uo) * g * absAB + uo * C.cwiseAbs()).array() + t.eta_out();
}

/// The product of A and B after both were rounded to t.storage from `from` (A and B are the
/// values before that rounding): the error of the stored product against the exact A·B.
inline Matrix product_bound_rounded_inputs(const Matrix& A, const Matrix& B, Types t, Format from) {
  if (A.cols() != B.rows())
    throw ShapeError(shardalg::detail::cat("precision::product_bound_rounded_inputs: A is ", A.rows(), "x", A.cols(), ", B is ",
                                 B.rows(), "x", B.cols()));
  const double g = gamma(A.cols(), t.u_acc()), uo = t.u_out(), ui = rounding_to(t.storage, from);
  const double cin = (1.0 + ui) * (1.0 + ui) - 1.0;
  const Matrix absAB = A.cwiseAbs() * B.cwiseAbs();
  const Matrix C = A * B;
  return ((1.0 + uo) * (g * (1.0 + cin) + cin) * absAB + uo * C.cwiseAbs()).array() + t.eta_out();
}

/// Where a sum of partials is rounded to storage: once at the end, or after every add.
enum class SumRounding { once, each_add };

/// The sum of P partials (same shape) added in a fixed order.
inline Matrix partial_sum_bound(const std::vector<Matrix>& partials, Types t, SumRounding r = SumRounding::once) {
  if (partials.empty()) throw ShapeError("precision::partial_sum_bound: no partials");
  const Index rows = partials[0].rows(), cols = partials[0].cols();
  Matrix abs_sum = Matrix::Zero(rows, cols), sum = Matrix::Zero(rows, cols);
  for (const auto& x : partials) {
    if (x.rows() != rows || x.cols() != cols)
      throw ShapeError(shardalg::detail::cat("precision::partial_sum_bound: a ", x.rows(), "x", x.cols(), " partial among ", rows,
                                   "x", cols, " ones"));
    abs_sum += x.cwiseAbs();
    sum += x;
  }
  const auto adds = static_cast<std::int64_t>(partials.size()) - 1;
  const double u = t.u_acc(), uo = t.u_out();
  const double eta = t.eta_out();
  if (r == SumRounding::each_add) {
    const double g = gamma(adds, (1.0 + u) * (1.0 + uo) - 1.0);
    return (g * abs_sum).array() + (1.0 + g) * static_cast<double>(adds) * eta;
  }
  return ((1.0 + uo) * gamma(adds, u) * abs_sum + uo * sum.cwiseAbs()).array() + eta;
}

/// Softmax over each row of X [rows, n]: y_i = exp(x_i − m) / Σ_j exp(x_j − m), m = max_j x_j.
/// Model, in accumulate: t_j = fl(x_j − m) (one rounding; m is exact), e_j = fl(exp(t_j)) with
/// relative error ≤ exp_rel (default 2u: one ulp), s = fl(Σ_j e_j) in any order (γ_{n−1}),
/// y_i = fl(e_i / s) (or e_i times a rounded 1/s: two roundings, the bound allows both), then
/// rounded to storage. With E_j = exp(x_j − m), S = Σ E_j, a rounding of t_j changes exp by a
/// factor within exp(±|x_j − m|·u), so ê_j/E_j ∈ [lo_j, hi_j] = [e^{−|x_j−m|u}(1 − exp_rel),
/// e^{|x_j−m|u}(1 + exp_rel)] and |ŝ − S| ≤ σ = Σ_j E_j·(hi_j(1 + γ_{n−1}) − 1). Then
///   |ŷ_i − y_i| ≤ y_i · max(hi_i(1 + u)²(1 + u_out)·S/(S − σ) − 1,  1 − lo_i(1 − u)²(1 − u_out)·S/(S + σ)) + η.
inline Matrix softmax_bound(const Matrix& X, Types t, double exp_rel = -1.0) {
  const double u = t.u_acc(), uo = t.u_out();
  if (exp_rel < 0) exp_rel = 2.0 * u;
  const Index n = X.cols();
  Matrix out(X.rows(), n);
  if (n == 0) return out;
  const double g = gamma(n - 1, u);
  for (Index i = 0; i < X.rows(); ++i) {
    const double m = X.row(i).maxCoeff();
    double S = 0, sigma = 0;
    for (Index j = 0; j < n; ++j) {
      const double d = m - X(i, j), E = std::exp(-d);
      S += E;
      sigma += E * (std::exp(d * u) * (1.0 + exp_rel) * (1.0 + g) - 1.0);
    }
    if (!(sigma < S))
      throw PrecisionError(shardalg::detail::cat("precision::softmax_bound: row ", i, ": the bound on the denominator's error (",
                                       sigma, ") is not below the denominator (", S, ")"));
    for (Index j = 0; j < n; ++j) {
      const double d = m - X(i, j), y = std::exp(-d) / S;
      const double hi = std::exp(d * u) * (1.0 + exp_rel), lo = std::max(0.0, std::exp(-d * u) * (1.0 - exp_rel));
      const double up = hi * (1.0 + u) * (1.0 + u) * (1.0 + uo) * S / (S - sigma) - 1.0;
      const double down = 1.0 - lo * (1.0 - u) * (1.0 - u) * (1.0 - uo) * S / (S + sigma);
      out(i, j) = y * std::max(up, down) + t.eta_out();
    }
  }
  return out;
}

namespace detail {
/// Normalisation of each row by sqrt(v + eps): LayerNorm (centred) or RMSNorm.
inline Matrix norm_bound(const Matrix& X, double eps, Types t, bool centre, const char* op) {
  const double u = t.u_acc(), uo = t.u_out();
  const Index n = X.cols();
  Matrix out(X.rows(), n);
  if (n == 0) return out;
  const double dn = static_cast<double>(n);
  const double g_mean = gamma(n + 1, u), g_var = gamma(n + 2, u);
  Eigen::VectorXd D(n), dD(n);
  for (Index i = 0; i < X.rows(); ++i) {
    const double mu = centre ? X.row(i).sum() / dn : 0.0;
    const double dmu = centre ? g_mean * X.row(i).cwiseAbs().sum() / dn : 0.0;
    double v = 0, dv = 0;
    for (Index j = 0; j < n; ++j) {
      D(j) = X(i, j) - mu;
      dD(j) = centre ? dmu + u * (std::abs(D(j)) + dmu) : 0.0;
      const double a = std::abs(D(j));
      v += D(j) * D(j);
      dv += (2.0 * a + dD(j)) * dD(j) + g_var * (a + dD(j)) * (a + dD(j));
    }
    v /= dn;
    dv /= dn;
    const double w = v + eps, dw = dv + u * (w + dv);
    if (!(dw < w))
      throw PrecisionError(shardalg::detail::cat("precision::", op, ": row ", i, ": the bound on the error of v + eps (", dw,
                                       ") is not below v + eps (", w, ")"));
    const double rw = std::sqrt(w), rho_hi = std::sqrt(1.0 + dw / w), rho_lo = std::sqrt(1.0 - dw / w);
    const double f_hi = (1.0 + u) * (1.0 + u) * (1.0 + uo) / ((1.0 - u) * rho_lo);
    const double f_lo = (1.0 - u) * (1.0 - u) * (1.0 - uo) / ((1.0 + u) * rho_hi);
    const double kappa = std::max(f_hi - 1.0, 1.0 - f_lo);
    for (Index j = 0; j < n; ++j) out(i, j) = std::abs(D(j)) / rw * kappa + dD(j) * f_hi / rw + t.eta_out();
  }
  return out;
}
}  // namespace detail

/// LayerNorm's normalisation of each row x [n] (no affine): y_j = (x_j − μ) / sqrt(v + eps),
/// μ = Σx/n, v = Σ(x − μ)²/n (two passes). Model, in accumulate: μ̂ = fl(fl(Σ x_j) / n) (n − 1
/// adds, n converted, one division: |μ̂ − μ| ≤ Δμ = γ_{n+1}·Σ|x_j|/n); d̂_j = fl(x_j − μ̂)
/// (|d̂_j − D_j| ≤ Δd_j = Δμ + u(|D_j| + Δμ)); v̂ = fl(fl(Σ fl(d̂_j²)) / n) (γ_{n+2} per term:
/// |v̂ − v| ≤ Δv = (1/n)Σ_j[(2|D_j| + Δd_j)Δd_j + γ_{n+2}(|D_j| + Δd_j)²]); ŵ = fl(v̂ + eps)
/// (Δw = Δv + u(w + Δv)); y_j = d̂_j / fl(sqrt(ŵ)) — or d̂_j times a rounded reciprocal — rounded to
/// storage. With ρ± = sqrt(1 ± Δw/w), F_hi = (1+u)²(1+u_out)/((1−u)ρ−), F_lo = (1−u)²(1−u_out)/((1+u)ρ+):
///   |ŷ_j − y_j| ≤ |y_j|·max(F_hi − 1, 1 − F_lo) + Δd_j·F_hi / sqrt(w) + η.
/// eps is the value the computation adds (already a value of accumulate).
inline Matrix layer_norm_bound(const Matrix& X, double eps, Types t) {
  return detail::norm_bound(X, eps, t, true, "layer_norm_bound");
}
/// RMSNorm's normalisation y_j = x_j / sqrt(Σx²/n + eps): the LayerNorm model with μ = 0, Δd = 0.
inline Matrix rms_norm_bound(const Matrix& X, double eps, Types t) {
  return detail::norm_bound(X, eps, t, false, "rms_norm_bound");
}

/// GeLU, tanh form, elementwise: g(x) = ½x(1 + tanh(c(x + a·x³))), c = sqrt(2/π), a = 0.044715.
/// Model, in accumulate: x³ = fl(fl(x·x)·x); the constants a and c rounded to accumulate;
/// t = fl(x + fl(a·x³)) (|t̂ − t| ≤ Δt = γ_4|a·x³| + u(|t| + γ_4|a·x³|)); z = fl(c·t̂)
/// (Δz = c·Δt + γ_2·c(|t| + Δt)); th = tanh(ẑ) with relative error ≤ tanh_rel (default 2u) —
/// |tanh ẑ − tanh z| ≤ Δτ = Δz·sech²(max(0, |z| − Δz)), |th − T| ≤ ΔT = Δτ + tanh_rel(|T| + Δτ);
/// p = fl(1 + th) (Δp = ΔT + u(1 + T + ΔT)); g = fl((½x)·p) (½x exact), then rounded to storage:
///   E = ½|x|(Δp + u(|1 + T| + Δp)),   |ĝ − g| ≤ E + u_out(|g| + E) + η.
inline Matrix gelu_tanh_bound(const Matrix& X, Types t, double tanh_rel = -1.0) {
  const double u = t.u_acc(), uo = t.u_out(), eta = t.eta_out();
  if (tanh_rel < 0) tanh_rel = 2.0 * u;
  const double c = std::sqrt(2.0 / 3.14159265358979323846), a = 0.044715;
  const double g2 = gamma(2, u), g4 = gamma(4, u);
  return X.unaryExpr([=](double x) {
    const double ax3 = std::abs(a * x * x * x), tt = x + a * x * x * x;
    const double dt = g4 * ax3 + u * (std::abs(tt) + g4 * ax3);
    const double z = c * tt, dz = c * dt + g2 * c * (std::abs(tt) + dt);
    const double T = std::tanh(z), zm = std::max(0.0, std::abs(z) - dz), sech = 1.0 / std::cosh(zm);
    const double dtau = dz * sech * sech, dT = dtau + tanh_rel * (std::abs(T) + dtau);
    const double dp = dT + u * (1.0 + T + dT);
    const double E = 0.5 * std::abs(x) * (dp + u * (std::abs(1.0 + T) + dp));
    const double gx = 0.5 * x * (1.0 + T);
    return E + uo * (std::abs(gx) + E) + eta;
  });
}

namespace detail {
/// An element as long double (the 16-bit types through float).
template <class T>
long double widen(const T& x) {
  if constexpr (std::is_floating_point_v<T> || std::is_integral_v<T>) return static_cast<long double>(x);
  else return static_cast<long double>(static_cast<float>(x));
}
}  // namespace detail

/// Per element |computed − exact| / bound, with 0/0 = 0 and (error > 0)/0 = ∞; a NaN in
/// `computed` is ∞. The difference is taken in long double, so that an exact value held in long
/// double (the reference of a double op) is not rounded to double first.
template <class D1, class D2, class D3>
Matrix error_ratios(const Eigen::MatrixBase<D1>& computed, const Eigen::MatrixBase<D2>& exact,
                    const Eigen::MatrixBase<D3>& bound) {
  if (computed.rows() != exact.rows() || computed.cols() != exact.cols() || bound.rows() != exact.rows() ||
      bound.cols() != exact.cols())
    throw ShapeError(shardalg::detail::cat("precision::error_ratios: computed ", computed.rows(), "x", computed.cols(),
                                 ", exact ", exact.rows(), "x", exact.cols(), ", bound ", bound.rows(), "x",
                                 bound.cols()));
  constexpr double inf = std::numeric_limits<double>::infinity();
  // Evaluated once: an expression argument (a product A * B) would be recomputed per element.
  const typename D1::PlainObject c_ = computed;
  const typename D2::PlainObject e_ = exact;
  const typename D3::PlainObject b_ = bound;
  Matrix r(exact.rows(), exact.cols());
  for (Index j = 0; j < r.cols(); ++j)
    for (Index i = 0; i < r.rows(); ++i) {
      const double e = static_cast<double>(std::abs(detail::widen(c_(i, j)) - detail::widen(e_(i, j))));
      const double b = static_cast<double>(detail::widen(b_(i, j)));
      if (std::isnan(e)) r(i, j) = inf;
      else if (b == 0.0) r(i, j) = e == 0.0 ? 0.0 : inf;
      else r(i, j) = e / b;
    }
  return r;
}

/// max |computed − exact| / bound over the elements (0 for an empty matrix): ≤ 1 when the bound holds.
template <class D1, class D2, class D3>
double error_over_bound(const Eigen::MatrixBase<D1>& computed, const Eigen::MatrixBase<D2>& exact,
                        const Eigen::MatrixBase<D3>& bound) {
  const Matrix r = error_ratios(computed, exact, bound);
  return r.size() ? r.maxCoeff() : 0.0;
}

/// The median of error_ratios (the typical tightness of a bound; 0 for an empty matrix).
inline double median_ratio(const Matrix& ratios) {
  if (ratios.size() == 0) return 0.0;
  std::vector<double> v(ratios.data(), ratios.data() + ratios.size());
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace shardalg::precision
