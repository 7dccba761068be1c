// shardalg/autodiff/layer_ops.hpp — the fused layer ops, differentiable: norms, causal attention and the
// vocabulary-parallel cross-entropy, each on the kernels the hand-written layers use
// (backend/cpu/kernels.hpp, nn/layers/cross_entropy.hpp), with its backward derived from the same formulas.
//
//   layer_norm(x, γ, β)      X[R], X[Row] or X[I] (whole rows); γ, β [1, h] in R (I for X[I])
//     dX = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)), g = dY ⊙ γ   (linear in dY: per summand)
//     dγ = col_sum(dY ⊙ x̂), dβ = col_sum(dY)                  (X[Row] → Partial: the SP reduction)
//   rms_norm(x, γ)           the same without centring and β
//   causal_attention(qkv, s) QKV[C] → O[C], each rank its own heads (nn::Kernels::causal_attention)
//   cross_entropy(logits, t) logits[T, v][C] → the mean loss, 1×1 [I]: the two all_reduces of the
//                            fused loss run forward; its backward is local (every rank its columns)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/autodiff/elementwise.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/nn/layers/norm.hpp"

namespace shardalg::ad {

/// LayerNorm (beta given) or RMSNorm (beta null) over whole rows. The weight layout is the
/// stream's world: I for X[I], R for X[R] and X[Row] (whose gradient is then Partial).
template <class T, class L, class LW, class B>
Var<T, L, B> norm(const Var<T, L, B>& x, const Var<T, LW, B>& gamma, const Var<T, LW, B>* beta, T eps) {
  // a norm needs whole rows: X[R], X[Row] or X[I] (E114 on C, E115 on Partial); its weights live in
  // the stream's world: I for X[I], R for X[R] and X[Row] (E170)
  require<L::kind == LayoutKind::partial ? Diag::rowwise_partial : Diag::rowwise_col, rules::rowwise(L::kind).valid, L>();
  require<Diag::invariant_mix,
          std::is_same_v<LW, std::conditional_t<std::is_same_v<L, Invariant>, Invariant, Replicated>>, L, LW>();
  using K = nn::Kernels<B>;
  const bool center = beta != nullptr;
  const auto& xv = x.value();
  if (gamma.cols() != x.cols())
    throw ShapeError(shardalg::detail::cat("ad::norm: gamma is 1x", gamma.cols(), ", the input has ", x.cols(), " columns"));
  const auto mv = K::row_mean_var(xv.local(), center);
  auto o = K::norm_apply(xv.local(), mv, gamma.value().local(), beta ? &beta->value().local() : nullptr, eps);
  auto xhat = std::make_shared<const Sharded<T, L, B>>(std::move(o.xhat), xv.rows(), xv.cols(), xv.group());
  auto rstd = std::make_shared<const typename B::template matrix<T>>(std::move(o.rstd));
  Sharded<T, L, B> y(std::move(o.y), xv.rows(), xv.cols(), xv.group());
  if (Tape* t = detail::tape_of(x, gamma)) {
    t->note(xhat, static_cast<std::size_t>(xhat->local().size()) * sizeof(T));
    t->note(rstd, static_cast<std::size_t>(rstd->size()) * sizeof(T));
  }
  auto step = [hx = x.handle(), hg = gamma.handle(), hb = beta ? beta->handle() : Var<T, LW, B>{}, pg = gamma.shared(),
               xhat, rstd, center](Tape& t, const auto& dy) {
    using CL = cot_t<L>;
    const auto sums = K::norm_grad_sums(dy.local(), xhat->local(), pg->local());
    auto dx = K::norm_grad_apply(dy.local(), xhat->local(), pg->local(), *rstd, sums, xhat->cols(), center);
    t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), dy.rows(), dy.cols(), dy.group()));
    // dγ = col_sum(dY ⊙ x̂): its layout by the core's rules, which is cot(LW) (Row → Partial = cot(R)).
    if (hg.tracked()) t.accumulate(hg, col_sum(shardalg::hadamard(dy, *xhat)));
    if (hb.tracked()) t.accumulate(hb, col_sum(dy));
  };
  if (beta) return detail::record<T, L, B>(std::move(y), std::move(step), x, gamma, *beta);
  return detail::record<T, L, B>(std::move(y), std::move(step), x, gamma);
}
template <class T, class L, class LW, class B>
Var<T, L, B> layer_norm(const Var<T, L, B>& x, const Var<T, LW, B>& gamma, const Var<T, LW, B>& beta, T eps) {
  return norm(x, gamma, &beta, eps);
}
template <class T, class L, class LW, class B>
Var<T, L, B> rms_norm(const Var<T, L, B>& x, const Var<T, LW, B>& gamma, T eps) {
  return norm<T, L, LW, B>(x, gamma, nullptr, eps);
}

/// Causal self-attention on each rank's fused QKV block (its whole heads): QKV[C] → O[C] (or on
/// R / I at TP 1). `s` describes the block (nn::AttnShape: batch, seq, units, q_per_unit, head_dim).
template <class T, class L, class B>
Var<T, L, B> causal_attention(const Var<T, L, B>& qkv, const nn::AttnShape& s, Index out_cols) {
  static_assert(!std::is_same_v<L, Partial> && !std::is_same_v<L, RowSharded>,
                "ad::causal_attention: each rank needs its heads' whole Q, K, V rows and columns: QKV[C] (or R, I)");
  using K = nn::Kernels<B>;
  auto o = K::causal_attention(qkv.value().local(), s);
  auto probs = std::make_shared<const typename B::template matrix<T>>(std::move(o.probs));
  Sharded<T, L, B> out(std::move(o.out), qkv.rows(), out_cols, qkv.group());
  if (Tape* t = detail::tape_of(qkv)) t->note(probs, static_cast<std::size_t>(probs->size()) * sizeof(T));
  return detail::record<T, L, B>(
      std::move(out),
      [hq = qkv.handle(), pq = qkv.shared(), probs, s](Tape& t, const auto& dout) {
        using CL = cot_t<L>;
        t.accumulate(hq, Sharded<T, CL, B>(K::causal_attention_grad(pq->local(), *probs, dout.local(), s), pq->rows(),
                                           pq->cols(), pq->group()));
      },
      qkv);
}

/// The fused vocabulary-parallel cross-entropy: logits[T, v][C] → the mean loss over the counted
/// tokens, 1×1 [I] (every rank holds it after the loss's two all_reduces, and every rank computes
/// its whole gradient). dlogits = d(loss) · (p − onehot)/count on each rank's columns: local.
template <class T, class B>
Var<T, Invariant, B> cross_entropy(const Var<T, ColSharded, B>& logits, std::span<const std::int64_t> targets,
                                   const nn::VocabParallelCrossEntropy<T, B>& ce) {
  auto f = ce.forward(logits.value(), targets);
  auto cache = std::make_shared<const typename nn::VocabParallelCrossEntropy<T, B>::Cache>(std::move(f.cache));
  typename B::template matrix<T> m = Mat<T, B>::Constant(1, 1, f.mean);
  Sharded<T, Invariant, B> loss(std::move(m), 1, 1, logits.group());
  return detail::record<T, Invariant, B>(
      std::move(loss),
      [hl = logits.handle(), cache, ce](Tape& t, const Sharded<T, Invariant, B>& dloss) {
        t.accumulate(hl, ce.backward_mean(*cache, dloss.local()(0, 0)));
      },
      logits);
}

/// The fused loss needs the logits vocabulary-parallel: gathered logits (R) would make every rank
/// add the whole vocabulary's exponentials P times (loss = correct + log P) — [shardalg.E150].
template <class T, class L, class B>
  requires(!std::is_same_v<L, ColSharded>)
auto cross_entropy(const Var<T, L, B>&, std::span<const std::int64_t>, const nn::VocabParallelCrossEntropy<T, B>&) {
  return diagnose_conversion<L::kind, LayoutKind::col>();
}

}  // namespace shardalg::ad
