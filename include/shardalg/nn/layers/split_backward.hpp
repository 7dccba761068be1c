// shardalg/nn/layers/split_backward.hpp — a transformer block's backward in two halves, for zero-bubble
// schedules (pipeline::zb_h1): B, the input gradient the previous stage waits for, and W, the
// weight gradients nobody waits for, run later from what B kept.
//
// Why the split is natural here: every linear layer's backward is two products of its cached
// input X and its output gradient dY,
//
//   dX = dY · Wᵀ   (B: on the path to the previous stage)      dW = Xᵀ · dY,  db = col_sum(dY)   (W)
//
// and X is already in the forward cache. So B walks the block backwards computing only the dX
// products (and the attention core, the activation's derivative, the norms and f's / the SP
// collectives on the way), keeping each linear layer's dY; W is the four weight GEMMs and bias
// sums from (cached X, kept dY). The norms' γ, β gradients (two column sums, no GEMM) come out of
// the norm's own backward in B. The fused backward (TransformerBlock::backward) computes exactly
// these products in the same order, so B then W gives its gradients (tests/pipeline checks them
// against the dense model).
//
//   B (plain block, in notation)                                   kept for W
//   dZ2[R] = dropout'(dY[R]);  dA[C] = dZ2[R]·W2ᵀ[C]               dZ2[R]   (fc2: dW2 = Aᵀ[Row]·dZ2, db2)
//   dH[C] = act'(H) ⊙ dA;  dX2 = dH[C]·W1ᵀ[Row] → Partial → all_reduce → R    dH[C] (fc1: dW1 = Xᵀ[R]·dH, db1)
//   LN2 backward (γ, β gradients here);  dY1 = dY + dLN2
//   dZ1[R] = dropout'(dY1);  dO[C] = dZ1[R]·Woᵀ[C]                 dZ1[R]   (proj: dWo = Oᵀ[Row]·dZ1, dbo)
//   dQKV[C] = attention core backward(QKV, P, dO)                  dQKV[C]  (qkv: dWqkv = Xᵀ[R]·dQKV, dbqkv)
//   dX1 = dQKV[C]·Wqkvᵀ[Row] → Partial → all_reduce → R;  LN1 backward;  dX = dY1 + dLN1
//
// Under sequence parallelism (SequenceParallelBlock) dY, dY1, dX are Row; dZ2 and dZ1 are
// all-gathered first (reduce_scatter's adjoint) and the two Partial input gradients are
// reduce-scattered (all_gather's adjoint): the same collectives as the fused backward, all in B.
// W communicates only for grouped-query attention with fewer groups than ranks (the K/V replica
// sync, as Attention::backward does).
#pragma once

#include <optional>
#include <utility>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/conjugates.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/layers/sp_block.hpp"

namespace shardalg::nn {

/// What B keeps for W: the output gradients of the block's four linear layers, and the norms'
/// parameter gradients (computed in B).
template <class Block>
struct BlockWeightWork {
  using T = typename Block::Input::value_type;
  using Bk = typename Block::Input::backend;
  using NormGrads = decltype(std::declval<typename Block::ParamGrads>().ln1);
  Sharded<T, Replicated, Bk> dz2, dz1;  // fc2's and proj's output gradients (whole under SP)
  Sharded<T, ColSharded, Bk> dh, dqkv;  // fc1's and qkv's output gradients
  NormGrads ln1, ln2;

  [[nodiscard]] std::size_t bytes() const {
    const auto b = [](const auto& x) { return static_cast<std::size_t>(x.local().size()) * sizeof(T); };
    const auto ob = [&](const auto& o) { return o ? b(*o) : std::size_t{0}; };
    return b(dz2) + b(dz1) + b(dh) + b(dqkv) + b(ln1.dgamma) + ob(ln1.dbeta) + b(ln2.dgamma) + ob(ln2.dbeta);
  }
};

namespace detail {

/// The block's two hidden-dropout sites (functions of (p, seed, tensor, global index); under
/// context parallelism they carry the cp rows), with the row base the caller set on the block.
struct BlockDropouts {
  Dropout attn, mlp;
};
template <class Block>
BlockDropouts block_dropouts(const Block& blk, Index row_base) {
  BlockDropouts d{blk.attn_dropout(), blk.mlp_dropout()};
  d.attn.row_base = d.mlp.row_base = row_base;
  return d;
}

/// dA[C] → dH[C]: the MLP activation's derivative at the cached pre-activation H.
template <class Mlp, class X>
X activation_grad(const Mlp& m, const X& h, const X& da) {
  using Bk = typename X::backend;
  switch (m.config().act) {
    case Activation::gelu_tanh: return hadamard(da, map(h, GeluTanhGrad{}));
    case Activation::gelu_erf: return hadamard(da, map(h, GeluErfGrad{}));
    case Activation::swiglu: break;
  }
  const Group& g = shardalg::detail::result_group(h.group(), da.group(), "swiglu_grad");
  return X(Kernels<Bk>::swiglu_grad(h.local(), da.local()), h.rows(), h.cols(), g);
}

/// Σ of the K/V weight (and bias) gradient columns over the ranks holding copies of a group
/// (grouped-query attention with fewer groups than ranks), as Attention::backward does.
template <class Attn, class G>
void sync_replicated_kv(const Attn& a, G& pg) {
  using Bk = typename Attn::Input::backend;
  using T = typename Attn::Input::value_type;
  const auto& lay = a.layout();
  Group grp = pg.dw.group();
  auto sc = maybe_scope(grp, "kv_replica_sync");
  const Index h = a.config().hidden, d = lay.head_dim, kv0 = lay.q_per_unit() * d, g = lay.group_of(grp.rank(), 0);
  const Index rows = h + (pg.db ? 1 : 0);
  auto buf = Bk::template zeros<T>(rows, lay.groups * 2 * d);
  Kernels<Bk>::place(buf, 0, g * 2 * d, Bk::copy_block(pg.dw.local(), 0, kv0, h, 2 * d));
  if (pg.db) Kernels<Bk>::place(buf, h, g * 2 * d, Bk::copy_block(pg.db->local(), 0, kv0, 1, 2 * d));
  auto sum = all_reduce(Sharded<T, Partial, Bk>(std::move(buf), rows, lay.groups * 2 * d, grp));
  Kernels<Bk>::place(pg.dw.local(), 0, kv0, Bk::copy_block(sum.local(), 0, g * 2 * d, h, 2 * d));
  if (pg.db) Kernels<Bk>::place(pg.db->local(), 0, kv0, Bk::copy_block(sum.local(), h, g * 2 * d, 1, 2 * d));
}

}  // namespace detail

template <class Block>
struct BlockInputGrads {
  typename Block::Input dx;
  BlockWeightWork<Block> work;
};

/// B: the block's input gradient dX (plain: R; sequence parallel: Row), and what W needs.
/// `row_base`: the global row of this rank's first token, as set on the block's dropouts.
template <class Block>
BlockInputGrads<Block> backward_input(const Block& blk, const typename Block::Cache& c, const typename Block::Input& dy,
                                      Index row_base) {
  using In = typename Block::Input;
  using T = typename In::value_type;
  using Bk = typename In::backend;
  constexpr bool sp = std::is_same_v<typename In::layout, RowSharded>;
  const auto drop = detail::block_dropouts(blk, row_base);
  const auto& mlp = blk.mlp();
  const auto& at = blk.attention();
  BlockWeightWork<Block> w;
  // The sub-layers' input gradients only: each linear layer's output gradient is kept for W.
  auto r = detail::block_backward(
      blk, c, dy, drop.attn, drop.mlp,
      [&](const auto& cm, const In& d) {  // dZ2 → dA → dH → dX (Partial) → f's adjoint or reduce_scatter
        if constexpr (sp) w.dz2 = adjoint::reduce_scatter(d);  // all_gather T·h
        else w.dz2 = d;
        Sharded<T, ColSharded, Bk> da = matmul(w.dz2, transpose(mlp.fc2().weight()));  // dZ2[R]·W2ᵀ[C]
        w.dh = detail::activation_grad(mlp, cm.h, da);
        Sharded<T, Partial, Bk> dx = matmul(w.dh, transpose(mlp.fc1().weight()));  // dH[C]·W1ᵀ[Row]
        if constexpr (sp) return adjoint::all_gather<RowSharded>(dx);  // reduce_scatter T·h
        else return adjoint::copy_to(std::move(dx));                   // all_reduce T·h
      },
      [&](const auto& ca, const In& d) {  // dZ1 → dO → dQKV → dX (Partial)
        if constexpr (sp) w.dz1 = adjoint::reduce_scatter(d);
        else w.dz1 = d;
        Sharded<T, ColSharded, Bk> dout = matmul(w.dz1, transpose(at.proj().weight()));  // dZ1[R]·Woᵀ[C]
        w.dqkv = at.attention_grad(ca, dout);  // the core's backward (over cp under context parallelism)
        Sharded<T, Partial, Bk> dx = matmul(w.dqkv, transpose(at.qkv().weight()));  // dQKV[C]·Wqkvᵀ[Row]
        if constexpr (sp) return adjoint::all_gather<RowSharded>(dx);
        else return adjoint::copy_to(std::move(dx));
      });
  w.ln1 = std::move(r.ln1);
  w.ln2 = std::move(r.ln2);
  return {std::move(r.dx), std::move(w)};
}

/// W: the block's parameter gradients from the forward cache and what B kept (the norms' from B).
template <class Block>
typename Block::ParamGrads backward_weights(const Block& blk, const typename Block::Cache& c, BlockWeightWork<Block> w) {
  const auto& mlp = blk.mlp();
  const auto& at = blk.attention();
  typename Block::ParamGrads g;
  g.ln1 = std::move(w.ln1);
  g.ln2 = std::move(w.ln2);
  g.mlp.fc2.dw = matmul(transpose(c.mlp.fc2.h), w.dz2);  // Aᵀ[Row]·dZ2[R] → Row
  if (mlp.fc2().bias()) g.mlp.fc2.db = col_sum(w.dz2);    // R → R
  g.mlp.fc1.dw = matmul(transpose(c.mlp.fc1.x), w.dh);    // Xᵀ[R]·dH[C] → C
  if (mlp.fc1().bias()) g.mlp.fc1.db = col_sum(w.dh);     // C → C
  g.attn.proj.dw = matmul(transpose(c.attn.proj.h), w.dz1);
  if (at.proj().bias()) g.attn.proj.db = col_sum(w.dz1);
  g.attn.qkv.dw = matmul(transpose(c.attn.qkv_in.x), w.dqkv);
  if (at.qkv().bias()) g.attn.qkv.db = col_sum(w.dqkv);
  if (at.layout().replicated_kv()) detail::sync_replicated_kv(at, g.attn.qkv);
  return g;
}

}  // namespace shardalg::nn
