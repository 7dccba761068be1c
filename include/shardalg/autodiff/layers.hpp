// shardalg/autodiff/layers.hpp — the Megatron layers written once more, with the differentiable
// ops and no backward at all: the derived twins of nn::Mlp, nn::Attention, nn::TransformerBlock
// and nn::SequenceParallelBlock (which stay: they are the reference and the teaching text).
//
// The residual stream outside the tensor-parallel regions is I (every rank computes it whole, and
// its gradient whole), so f and g are the conversions of docs/design.md §5a:
//
//   mlp        X[I] → f → X[R] · W1[C] + b1[C] → act → A[C] · W2[Row] → Partial → g → Z[I] + b2[I]
//   attention  X[I] → f → X[R] · Wqkv[C] + bqkv[C] → heads (local) → O[C] · Wo[Row] → Partial → g → + bo[I]
//   block      X[I] → LN1[I] → attention → dropout → + X → LN2 → mlp → dropout → + → Y[I]
//   SP block   X[Row] → LN[Row] → all_gather → R → … → Partial → reduce_scatter → Row + b[R] → …
//
// Derived, the backward's collectives are the adjoints: one all_reduce per f (Partial → I) and none
// for g, as the hand-written layers; under SP an all_gather's adjoint is a reduce_scatter and the
// reverse. The norm weights under SP are R (they act on per-rank rows), so their gradients come
// out Partial (E130 until reduced), and so do the row-parallel biases added on X[Row]: the
// hand-written SP block takes those from the all-gathered dZ it forms anyway, the derived one
// reduces them like the norm weights (tests/autodiff/test_autodiff_layers.cpp measures both).
// Grouped-query attention needs every rank to own whole query groups (groups a multiple of the TP
// size); replicated K/V copies (groups < TP) are a hand-written layer's extra reduction
// (nn/layers/attention.hpp) with no layout of their own: refused here.
#pragma once

#include <optional>
#include <type_traits>

#include "shardalg/autodiff/collectives.hpp"
#include "shardalg/autodiff/elementwise.hpp"
#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/autodiff/layer_ops.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/nn/layers/attention.hpp"
#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/layers/dropout.hpp"

namespace shardalg::ad {

/// A column-parallel weight and its optional bias (X[R] · W[C] + b[C]).
template <class T, class B = CpuBackend>
struct ColumnParams {
  Var<T, ColSharded, B> w;
  std::optional<Var<T, ColSharded, B>> b;
};
/// A row-parallel weight and its optional bias, added once after the reduction (b[I] after g, or
/// b[R] on X[Row] under SP).
template <class T, class LB, class B = CpuBackend>
struct RowParams {
  Var<T, RowSharded, B> w;
  std::optional<Var<T, LB, B>> b;
};
template <class T, class LW, class B = CpuBackend>
struct NormParams {
  Var<T, LW, B> gamma;
  std::optional<Var<T, LW, B>> beta;  // absent: RMSNorm
  T eps;
};

namespace detail {
template <class T, class L, class B>
Var<T, ColSharded, B> column(const Var<T, L, B>& x, const ColumnParams<T, B>& p) {
  auto y = ad::matmul(x, p.w);  // X[R] · W[C] → Y[C]
  return p.b ? ad::add_bias(y, *p.b) : y;
}
template <class T, class B>
Var<T, ColSharded, B> activate(const Var<T, ColSharded, B>& h, nn::Activation act) {
  switch (act) {
    case nn::Activation::gelu_tanh: return ad::map(h, ad::gelu);
    case nn::Activation::gelu_erf: return ad::map(h, ad::gelu_erf);
    case nn::Activation::swiglu: break;
  }
  return ad::swiglu(h);  // each rank's [gate_r | up_r] block (nn::Mlp's physical layout)
}
template <class T, class L, class LW, class B>
Var<T, L, B> apply_norm(const Var<T, L, B>& x, const NormParams<T, LW, B>& n) {
  return n.beta ? ad::layer_norm(x, n.gamma, *n.beta, n.eps) : ad::rms_norm(x, n.gamma, n.eps);
}
}  // namespace detail

/// The MLP's inner part on X[R]: fc1, activation, fc2 → Z[Partial] (before g and b2).
template <class T, class LB, class B>
Var<T, Partial, B> mlp_partial(const Var<T, Replicated, B>& x, const ColumnParams<T, B>& fc1, const RowParams<T, LB, B>& fc2,
                               nn::Activation act) {
  return ad::matmul(detail::activate(detail::column(x, fc1), act), fc2.w);  // A[C] · W2[Row] → Partial
}

/// The Megatron MLP: X[I] → f → … → g → Z[I] (+ b2[I]).
template <class T, class B>
Var<T, Invariant, B> mlp(const Var<T, Invariant, B>& x, const ColumnParams<T, B>& fc1,
                         const RowParams<T, Invariant, B>& fc2, nn::Activation act) {
  auto z = ad::all_reduce<Invariant>(mlp_partial(ad::copy_to(x), fc1, fc2, act));  // g
  return fc2.b ? ad::add_bias(z, *fc2.b) : z;
}

/// Causal self-attention's inner part on X[R] → Z[Partial]: the fused QKV (each rank its own
/// whole heads: nn::QkvLayout with groups a multiple of P), the local heads, the projection.
template <class T, class LB, class B>
Var<T, Partial, B> attention_partial(const Var<T, Replicated, B>& x, const ColumnParams<T, B>& qkv,
                                     const RowParams<T, LB, B>& proj, const nn::AttentionConfig& c) {
  const nn::QkvLayout lay{c.heads, c.num_groups(), c.head_dim(), x.group().size()};
  if (lay.replicated_kv())
    throw ShapeError(shardalg::detail::cat("ad::attention: ", lay.groups, " query groups on ", lay.p,
                                           " ranks: K/V copies on several ranks are not a layout (use groups a "
                                           "multiple of the tensor-parallel size, or nn::Attention)"));
  if (x.rows() % c.seq != 0)
    throw ShapeError(shardalg::detail::cat("ad::attention: ", x.rows(), " rows are not a whole number of sequences of length ", c.seq));
  const nn::AttnShape s{x.rows() / c.seq, c.seq, lay.units(), lay.q_per_unit(), lay.head_dim};
  auto o = ad::causal_attention(detail::column(x, qkv), s, c.hidden);  // QKV[C] → O[C]
  return ad::matmul(o, proj.w);                                         // O[C] · Wo[Row] → Partial
}

template <class T, class B>
Var<T, Invariant, B> attention(const Var<T, Invariant, B>& x, const ColumnParams<T, B>& qkv,
                               const RowParams<T, Invariant, B>& proj, const nn::AttentionConfig& c) {
  auto z = ad::all_reduce<Invariant>(attention_partial(ad::copy_to(x), qkv, proj, c));  // g
  return proj.b ? ad::add_bias(z, *proj.b) : z;
}

/// A transformer block's parameters: norms and biases after g typed LB (I for the plain block,
/// R under sequence parallelism).
template <class T, class LB, class B = CpuBackend>
struct BlockParams {
  NormParams<T, LB, B> ln1;
  ColumnParams<T, B> qkv;
  RowParams<T, LB, B> proj;
  NormParams<T, LB, B> ln2;
  ColumnParams<T, B> fc1;
  RowParams<T, LB, B> fc2;
};

/// The pre-norm transformer block on the invariant stream: Y = X' + drop(MLP(LN2(X'))), X' = X +
/// drop(Attn(LN1(X))).
template <class T, class B>
Var<T, Invariant, B> block(const Var<T, Invariant, B>& x, const BlockParams<T, Invariant, B>& p,
                           const nn::BlockConfig& c, const nn::Dropout& drop_attn, const nn::Dropout& drop_mlp) {
  auto y1 = x + ad::dropout(attention(detail::apply_norm(x, p.ln1), p.qkv, p.proj, c.attention()), drop_attn);
  return y1 + ad::dropout(mlp(detail::apply_norm(y1, p.ln2), p.fc1, p.fc2, c.act), drop_mlp);
}

/// The sequence-parallel block on X[Row]: each sub-layer enters with all_gather (Row → R) and
/// leaves with reduce_scatter (Partial → Row), its bias b[R] added on the rows.
template <class T, class B>
Var<T, RowSharded, B> sp_block(const Var<T, RowSharded, B>& x, const BlockParams<T, Replicated, B>& p,
                               const nn::BlockConfig& c, const nn::Dropout& drop_attn, const nn::Dropout& drop_mlp) {
  auto leave = [](const Var<T, Partial, B>& z, const std::optional<Var<T, Replicated, B>>& b) {
    auto r = ad::reduce_scatter<RowSharded>(z);
    return b ? ad::add_bias(r, *b) : r;
  };
  auto a = attention_partial(ad::all_gather(detail::apply_norm(x, p.ln1)), p.qkv, p.proj, c.attention());
  auto y1 = x + ad::dropout(leave(a, p.proj.b), drop_attn);
  auto m = mlp_partial(ad::all_gather(detail::apply_norm(y1, p.ln2)), p.fc1, p.fc2, c.act);
  return y1 + ad::dropout(leave(m, p.fc2.b), drop_mlp);
}

}  // namespace shardalg::ad
