// shardalg/nn/layers/norm.hpp — LayerNorm and RMSNorm over the hidden dimension (each row is a token).
//
// LayerNorm (local: every rank holds whole rows, X[R] or X[Row]; γ, β [1, h] R)
//   forward   (μ, σ²) per row, two passes;  x̂ = (x − μ)/√(σ² + ε);  Y = x̂ ⊙ γ + β   → Y[L]
//             (row by row: the row stays in L1 between statistics and normalisation, backend/cpu/fused.hpp)
//   backward  g = dY ⊙ γ;  dX = (g − mean(g) − x̂·mean(g ⊙ x̂))/√(σ² + ε)         → dX[L]
//             dγ = col_sum(dY ⊙ x̂), dβ = col_sum(dY):  R → R (the whole gradient on every
//             rank), Row → Partial (each rank summed its tokens: all_reduce before the update —
//             sgd_update refuses it otherwise, E130); dX, dγ, dβ in one sweep (backend/cpu/fused.hpp)
//
// ParallelLayerNorm (X[C]: each rank holds a block of every row's features; γ, β [1, h] C)
//   forward   (Σx, Σx²) of the local block → [T, 2] Partial;  all_reduce → R;  μ, σ² → local x̂
//   backward  (Σg, Σg·x̂) of the local block → [T, 2] Partial;  all_reduce → R;  local dX[C]
//             dγ, dβ = col_sum(… [C]) → C (local)
//   communication: one all_reduce of 2·T forward and one backward.
//   bf16 / fp16 (X[C] stored in 16 bits): the sums, their all_reduce, μ, σ², x̂ and the backward's
//             sums and dγ, dβ in fp32, each output (y, x̂, rstd; dX, dγ, dβ) rounded once.
//
// RMSNorm is the same with center = false: no mean, no β; x̂ = x/√(mean(x²) + ε).
#pragma once

#include <optional>
#include <type_traits>

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/core/cast.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/backend/cpu/fused.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/nn/layers/linear.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

enum class NormKind { layer, rms };

inline constexpr std::string_view norm_name(NormKind k) { return k == NormKind::layer ? "LayerNorm" : "RMSNorm"; }

/// LayerNorm / RMSNorm on whole rows: X[R] or X[Row].
template <Element T, class B = CpuBackend>
class LayerNorm {
 public:
  using Param = Sharded<T, Replicated, B>;  // [1, h]

  template <class L>
  struct Cache {
    Sharded<T, L, B> xhat;
    typename B::template matrix<T> rstd;  // [local rows, 1]
  };
  template <class L>
  struct Forward {
    Sharded<T, L, B> y;
    Cache<L> cache;
  };
  /// The parameter gradients' layout is col_sum's: R for X[R], Partial for X[Row].
  template <class L>
  using GradLayout = layout_t<rules::col_sum(L::kind).result>;
  template <class L>
  struct ParamGrads {
    Sharded<T, GradLayout<L>, B> dgamma;
    std::optional<Sharded<T, GradLayout<L>, B>> dbeta;
  };
  template <class L>
  struct Grads {
    Sharded<T, L, B> dx;
    ParamGrads<L> params;
  };

  LayerNorm(Param gamma, std::optional<Param> beta, NormKind kind, T eps)
      : gamma_(std::move(gamma)), beta_(std::move(beta)), kind_(kind), eps_(eps) {
    if (kind_ == NormKind::rms && beta_)
      throw ShapeError("RMSNorm: has no bias (beta); pass std::nullopt");
    if (kind_ == NormKind::layer && !beta_) throw ShapeError("LayerNorm: needs a bias (beta)");
  }
  /// γ = 1, β = 0.
  static LayerNorm init(Index hidden, NormKind kind, const Group& g, T eps = T(1e-5)) {
    auto gamma = from_global<T, Replicated, B>(1, hidden, g, [](Index, Index) { return 1.0; });
    std::optional<Param> beta;
    if (kind == NormKind::layer) beta = from_global<T, Replicated, B>(1, hidden, g, [](Index, Index) { return 0.0; });
    return LayerNorm(std::move(gamma), std::move(beta), kind, eps);
  }
  template <class M>
  static LayerNorm from_dense(const M& gamma, const M* beta, NormKind kind, const Group& g, T eps = T(1e-5)) {
    if (gamma.rows() != 1)
      throw ShapeError(detail::cat("LayerNorm.from_dense: gamma is ", gamma.rows(), "x", gamma.cols(),
                                   ", expected one row (1 x hidden)"));
    detail::require_master("LayerNorm.from_dense", "beta", beta, kind == NormKind::layer, 1, gamma.cols(),
                           "RMSNorm has no beta");
    auto gm = from_global<T, Replicated, B>(1, gamma.cols(), g, [&](Index, Index j) { return gamma(0, j); });
    std::optional<Param> bt;
    if (beta) bt = from_global<T, Replicated, B>(1, beta->cols(), g, [&](Index, Index j) { return (*beta)(0, j); });
    return LayerNorm(std::move(gm), std::move(bt), kind, eps);
  }

  [[nodiscard]] Index hidden() const { return gamma_.cols(); }
  [[nodiscard]] NormKind kind() const { return kind_; }
  [[nodiscard]] const Param& gamma() const { return gamma_; }
  [[nodiscard]] const std::optional<Param>& beta() const { return beta_; }
  Param& gamma() { return gamma_; }
  std::optional<Param>& beta() { return beta_; }

  template <class L>
  auto forward(const Sharded<T, L, B>& x) const {
    constexpr auto rule = rules::rowwise(L::kind);
    if constexpr (!rule.valid) {
      return diagnose<rule.error, L>();  // C: use ParallelLayerNorm; Partial: reduce first
    } else {
      detail::require_cols(norm_name(kind_), x.cols(), hidden());
      const bool center = kind_ == NormKind::layer;
      // statistics and normalisation row by row, one sweep (backend/cpu/fused.hpp)
      auto o = Fused<B>::norm_forward(x.local(), gamma_.local(), beta_ ? &beta_->local() : nullptr, eps_, center);
      return Forward<L>{Sharded<T, L, B>(std::move(o.y), x.rows(), x.cols(), x.group()),
                        Cache<L>{Sharded<T, L, B>(std::move(o.xhat), x.rows(), x.cols(), x.group()), std::move(o.rstd)}};
    }
  }

  template <class L>
  Grads<L> backward(const Cache<L>& c, const Sharded<T, L, B>& dy) const {
    return backward_impl(c, dy, nullptr);
  }
  /// The residual branch's cotangent added in the same sweep: dX = residual + norm′(dY), the
  /// bits of `residual + backward(c, dy).dx` (a pre-LN block's dY1 = dY + LN2′(dX_mlp)).
  template <class L>
  Grads<L> backward_add(const Cache<L>& c, const Sharded<T, L, B>& dy, const Sharded<T, L, B>& residual) const {
    shardalg::detail::same_shape_group(dy, residual, shardalg::detail::cat(norm_name(kind_), ".backward_add"));
    return backward_impl(c, dy, &residual.local());
  }

 private:
  template <class L>
  Grads<L> backward_impl(const Cache<L>& c, const Sharded<T, L, B>& dy, const typename B::template matrix<T>* residual) const {
    const bool center = kind_ == NormKind::layer;
    // dX, dγ = col_sum(dY ⊙ x̂) and dβ = col_sum(dY) in one sweep (backend/cpu/fused.hpp); the layouts are
    // col_sum's (R → R, Row → Partial), checked as the unfused col_sum(hadamard(…)) checks them
    const Group& g = shardalg::detail::same_shape_group(dy, c.xhat, "hadamard");
    auto e = explain_op(g, "norm_grad", dtype_of<T>,
                        {note(dy), residual ? " → residual + dX, Σ_i dY ⊙ x̂, Σ_i dY" : " → dX, Σ_i dY ⊙ x̂, Σ_i dY"});
    auto r = Fused<B>::norm_backward(dy.local(), c.xhat.local(), gamma_.local(), c.rstd, center, beta_.has_value(), residual);
    using GL = GradLayout<L>;
    ParamGrads<L> pg{Sharded<T, GL, B>(std::move(r.dgamma), 1, dy.cols(), g), std::nullopt};
    if (beta_) pg.dbeta.emplace(std::move(r.dbeta), 1, dy.cols(), dy.group());
    return {Sharded<T, L, B>(std::move(r.dx), dy.rows(), dy.cols(), dy.group()), std::move(pg)};
  }

 public:
  /// Needs replicated gradients: from X[Row] all_reduce them first (E130 otherwise).
  template <class L>
  void sgd(const ParamGrads<L>& g, T lr) {
    sgd_update(gamma_, g.dgamma, lr);
    if (beta_) sgd_update(*beta_, *g.dbeta, lr);
  }

 private:
  Param gamma_;
  std::optional<Param> beta_;
  NormKind kind_;
  T eps_;
};

/// LayerNorm / RMSNorm on column-sharded activations X[C]: partial statistics, one all-reduce
/// of [T, 2] forward and one backward.
template <Element T, class B = CpuBackend>
class ParallelLayerNorm {
 public:
  using Param = Sharded<T, ColSharded, B>;  // [1, h]
  using X = Sharded<T, ColSharded, B>;

  struct Cache {
    X xhat;
    typename B::template matrix<T> rstd;
  };
  struct Forward {
    X y;
    Cache cache;
  };
  struct ParamGrads {
    Param dgamma;
    std::optional<Param> dbeta;
  };
  struct Grads {
    X dx;
    ParamGrads params;
  };

  ParallelLayerNorm(Param gamma, std::optional<Param> beta, NormKind kind, T eps)
      : gamma_(std::move(gamma)), beta_(std::move(beta)), kind_(kind), eps_(eps) {
    if (kind_ == NormKind::rms && beta_)
      throw ShapeError("RMSNorm: has no bias (beta); pass std::nullopt");
    if (kind_ == NormKind::layer && !beta_) throw ShapeError("LayerNorm: needs a bias (beta)");
  }
  /// Any hidden size: the statistics are sums over the feature blocks divided by the global
  /// hidden size (mean_var_from_sums), never by P × the local block.
  static void check(Index, int) {}
  static ParallelLayerNorm init(Index hidden, NormKind kind, const Group& g, T eps = T(1e-5)) {
    check(hidden, g.size());
    auto gamma = from_global<T, ColSharded, B>(1, hidden, g, [](Index, Index) { return 1.0; });
    std::optional<Param> beta;
    if (kind == NormKind::layer) beta = from_global<T, ColSharded, B>(1, hidden, g, [](Index, Index) { return 0.0; });
    return ParallelLayerNorm(std::move(gamma), std::move(beta), kind, eps);
  }
  template <class M>
  static ParallelLayerNorm from_dense(const M& gamma, const M* beta, NormKind kind, const Group& g, T eps = T(1e-5)) {
    if (gamma.rows() != 1)
      throw ShapeError(detail::cat("ParallelLayerNorm.from_dense: gamma is ", gamma.rows(), "x", gamma.cols(),
                                   ", expected one row (1 x hidden)"));
    detail::require_master("ParallelLayerNorm.from_dense", "beta", beta, kind == NormKind::layer, 1, gamma.cols(),
                           "RMSNorm has no beta");
    check(gamma.cols(), g.size());
    auto gm = from_global<T, ColSharded, B>(1, gamma.cols(), g, [&](Index, Index j) { return gamma(0, j); });
    std::optional<Param> bt;
    if (beta) bt = from_global<T, ColSharded, B>(1, beta->cols(), g, [&](Index, Index j) { return (*beta)(0, j); });
    return ParallelLayerNorm(std::move(gm), std::move(bt), kind, eps);
  }

  [[nodiscard]] Index hidden() const { return gamma_.cols(); }
  [[nodiscard]] const Param& gamma() const { return gamma_; }
  [[nodiscard]] const std::optional<Param>& beta() const { return beta_; }

  Forward forward(const X& x) const {
    detail::require_cols("ParallelLayerNorm", x.cols(), hidden());
    if constexpr (HostHalf<T>) {  // 16-bit storage: statistics and x̂ in fp32; y, x̂ and rstd rounded once
      const auto w = [](const Sharded<T, ColSharded, B>& v) { return cast<float>(v); };
      const std::optional<Sharded<float, ColSharded, B>> bf = beta_ ? std::optional(w(*beta_)) : std::nullopt;
      auto o = normalise(w(x), w(gamma_), bf ? &*bf : nullptr, static_cast<float>(eps_));
      return {cast<T>(o.y), Cache{cast<T>(o.xhat), B::template cast<T>(o.rstd)}};
    } else {
      auto o = normalise(x, gamma_, beta_ ? &*beta_ : nullptr, eps_);
      return {std::move(o.y), Cache{std::move(o.xhat), std::move(o.rstd)}};
    }
  }

  Grads backward(const Cache& c, const X& dy) const {
    if constexpr (HostHalf<T>) {  // from the stored x̂ and rstd: the row sums, dX, dγ, dβ in fp32, each rounded once
      auto g = gradients(cast<float>(dy), cast<float>(c.xhat), cast<float>(gamma_), B::template cast<float>(c.rstd));
      ParamGrads pg{cast<T>(g.dgamma), g.dbeta ? std::optional(cast<T>(*g.dbeta)) : std::nullopt};
      return {cast<T>(g.dx), std::move(pg)};
    } else {
      auto g = gradients(dy, c.xhat, gamma_, c.rstd);
      return {std::move(g.dx), ParamGrads{std::move(g.dgamma), std::move(g.dbeta)}};
    }
  }

  void sgd(const ParamGrads& g, T lr) {
    sgd_update(gamma_, g.dgamma, lr);
    if (beta_) sgd_update(*beta_, *g.dbeta, lr);
  }

 private:
  // The arithmetic, in S: T itself, or fp32 for 16-bit T. The [T, 2] sums are all-reduced in S,
  // so a bf16 program's statistics are never rounded to bf16 (one-pass σ² = Σx²/h − μ² cancels:
  // 16-bit sums would lose it; docs/verify.md).
  template <class S>
  using XS = Sharded<S, ColSharded, B>;
  template <class S>
  struct Normalised {
    XS<S> y, xhat;
    typename B::template matrix<S> rstd;
  };
  template <class S>
  struct Gradients {
    XS<S> dx, dgamma;
    std::optional<XS<S>> dbeta;
  };

  template <class S>
  Normalised<S> normalise(const XS<S>& x, const XS<S>& gamma, const XS<S>* beta, S eps) const {
    const bool center = kind_ == NormKind::layer;
    // (Σx, Σx²) of the local feature block: a summand of the row's sums.
    Sharded<S, Partial, B> part(Kernels<B>::row_power_sums(x.local()), x.rows(), 2, x.group());
    Sharded<S, Replicated, B> sums = all_reduce(std::move(part));  // 2·T elements
    const auto mv = Kernels<B>::mean_var_from_sums(sums.local(), hidden(), center);
    auto o = Kernels<B>::norm_apply(x.local(), mv, gamma.local(), beta ? &beta->local() : nullptr, eps);
    return {XS<S>(std::move(o.y), x.rows(), x.cols(), x.group()), XS<S>(std::move(o.xhat), x.rows(), x.cols(), x.group()),
            std::move(o.rstd)};
  }

  template <class S>
  Gradients<S> gradients(const XS<S>& dy, const XS<S>& xhat, const XS<S>& gamma,
                         const typename B::template matrix<S>& rstd) const {
    const bool center = kind_ == NormKind::layer;
    Sharded<S, Partial, B> part(Kernels<B>::norm_grad_sums(dy.local(), xhat.local(), gamma.local()), dy.rows(), 2,
                                dy.group());
    Sharded<S, Replicated, B> sums = all_reduce(std::move(part));  // 2·T elements
    auto dx = Kernels<B>::norm_grad_apply(dy.local(), xhat.local(), gamma.local(), rstd, sums.local(), hidden(), center);
    Gradients<S> g{XS<S>(std::move(dx), dy.rows(), dy.cols(), dy.group()), col_sum(hadamard(dy, xhat)), std::nullopt};  // C → C
    if (beta_) g.dbeta = col_sum(dy);
    return g;
  }

  Param gamma_;
  std::optional<Param> beta_;
  NormKind kind_;
  T eps_;
};

}  // namespace shardalg::nn
