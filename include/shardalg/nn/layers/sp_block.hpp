// shardalg/nn/layers/sp_block.hpp — the pre-LN transformer block under sequence parallelism (Megatron's
// "sequence parallel", Korthikanti et al. 2022). Between blocks the activations are RowSharded:
// rank r holds tokens [r·T/P, (r+1)·T/P). LayerNorm, dropout and the residual adds run on the
// shard; an all_gather enters each column-parallel region and a reduce_scatter leaves each
// row-parallel one, where the plain block has f (identity) and g (all_reduce):
//
//   X[Row] → LN1 → A[Row] → all_gather → A[R] → Attention → Z1[Partial] → reduce_scatter → Z1[Row]
//          → + bo → dropout → + X → Y1[Row]
//   Y1[Row] → LN2 → M[Row] → all_gather → M[R] → MLP → Z2[Partial] → reduce_scatter → Z2[Row]
//          → + b2 → dropout → + Y1 → Y[Row]
//
// Backward (the adjoints: reduce_scatter ↔ all_gather):
//   dY[Row] → dropout → dZ2[Row] → all_gather → dZ2[R] → MLP → dM[Partial] → reduce_scatter → dM[Row]
//           → LN2 → + dY → dY1[Row];  the same through the attention → dX[Row]
//
// Ledger per block: forward 2 all_gather + 2 reduce_scatter of T·h; backward 2 reduce_scatter +
// 2 all_gather of T·h. An all_reduce is a reduce_scatter followed by an all_gather, so the bytes
// equal the plain block's 2 + 2 all-reduces; what SP saves is memory: the residual stream, the
// norms' inputs and outputs and the dropout inputs are T/P rows per rank instead of T.
//
// Gradients. The norms' weights are replicated but see only this rank's tokens: their gradients
// are col_sum of Row tensors, i.e. Partial (base/rules.hpp). `backward` returns them Partial;
// `reduce_grads` all-reduces them (one all_reduce of 2h per LayerNorm — γ and β packed — or h per
// RMSNorm) into `ReducedGrads`, which is TransformerBlock's ParamGrads. `sgd` (and the optimizers
// in nn/optim/optim.hpp) refuse a Partial gradient at compile time ([shardalg.E130]): forgetting the
// reduction — Megatron's recurring sequence-parallel bug — does not compile.
// The output biases (bo, b2) are replicated too, but their gradient is taken from the gathered
// dZ[R] the weight gradient needs anyway: col_sum(R) → R, complete on every rank, no reduction.
#pragma once

#include <optional>
#include <utility>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/nn/layers/block.hpp"

namespace shardalg::nn {

template <Element T, class B = CpuBackend>
class SequenceParallelBlock : public detail::BlockParts<SequenceParallelBlock<T, B>, T, B> {
  using Parts = detail::BlockParts<SequenceParallelBlock<T, B>, T, B>;
  using Parts::attn_, Parts::drop_attn_, Parts::drop_mlp_, Parts::ln1_, Parts::ln2_, Parts::mlp_;

 public:
  using typename Parts::Attn;
  using typename Parts::MlpT;
  using typename Parts::Norm;
  using Parts::Parts;
  using Input = Sharded<T, RowSharded, B>;  // [T, h], tokens split

  struct Cache {
    typename Norm::template Cache<RowSharded> ln1;
    typename Attn::Cache attn;
    typename Norm::template Cache<RowSharded> ln2;
    typename MlpT::Cache mlp;
    std::optional<Input> input;  // Recompute::full: the block's input only, the fields above empty
  };
  struct Forward {
    Input y;
    Cache cache;
  };
  /// As backward returns them: the norm weights' gradients are Partial.
  struct ParamGrads {
    typename Norm::template ParamGrads<RowSharded> ln1;
    typename Attn::ParamGrads attn;
    typename Norm::template ParamGrads<RowSharded> ln2;
    typename MlpT::ParamGrads mlp;
  };
  /// After reduce_grads: every gradient in its parameter's layout (TransformerBlock's type).
  using ReducedGrads = typename TransformerBlock<T, B>::ParamGrads;
  struct Grads {
    Input dx;
    ParamGrads params;
  };

  /// The plain block's checks. The tokens split over the ranks in balanced blocks: any count.
  static void check(const BlockConfig& c, int p) { TransformerBlock<T, B>::check(c, p); }

  /// The forward with every cache kept (BlockParts::forward, without full recomputation).
  Forward forward_stored(const Input& x) const {
    auto l1 = ln1_.forward(x);  // on the shard
    auto a = [&] {
      auto s = detail::maybe_scope(x.group(), "attn");
      auto f = attn_.forward_partial(all_gather(l1.y));  // enter: all_gather T·h
      return std::pair{attn_.proj().add_output_bias(reduce_scatter<RowSharded>(f.z)),  // leave: reduce_scatter T·h
                       std::move(f.cache)};
    }();
    Input y1 = x + drop_attn_.forward(a.first);
    auto l2 = ln2_.forward(y1);
    auto m = [&] {
      auto s = detail::maybe_scope(x.group(), "mlp");
      auto f = mlp_.forward_partial(all_gather(l2.y));
      return std::pair{mlp_.fc2().add_output_bias(reduce_scatter<RowSharded>(f.z)), std::move(f.cache)};
    }();
    Input y = y1 + drop_mlp_.forward(m.first);
    return {std::move(y), Cache{std::move(l1.cache), std::move(a.second), std::move(l2.cache), std::move(m.second), std::nullopt}};
  }

  /// detail::block_backward with each sub-layer entered by reduce_scatter's adjoint (all_gather
  /// T·h) and left by all_gather's (reduce_scatter T·h); the norm weights' gradients stay Partial.
  Grads backward(const Cache& c, const Input& dy) const {
    if (c.input) return backward(forward_stored(*c.input).cache, dy);  // full recomputation
    ParamGrads p;
    auto r = detail::block_backward(
        *this, c, dy, drop_attn_, drop_mlp_,
        [&](const auto& cm, const Input& d) {
          auto g = mlp_.backward_partial(cm, adjoint::reduce_scatter(d));  // all_gather T·h
          p.mlp = std::move(g.params);
          return adjoint::all_gather<RowSharded>(g.dx);  // reduce_scatter T·h
        },
        [&](const auto& ca, const Input& d) {
          auto g = attn_.backward_partial(ca, adjoint::reduce_scatter(d));
          p.attn = std::move(g.params);
          return adjoint::all_gather<RowSharded>(g.dx);
        });
    p.ln1 = std::move(r.ln1);
    p.ln2 = std::move(r.ln2);
    return {std::move(r.dx), std::move(p)};
  }

  /// The norm weights' Partial gradients → R: one all_reduce per norm (γ ‖ β packed: 2h values
  /// for LayerNorm, h for RMSNorm), scope "norm_grads". Call once per step, after accumulating.
  ReducedGrads reduce_grads(ParamGrads g) const {
    auto s = detail::maybe_scope(g.attn.proj.dw.group(), "norm_grads");
    return {reduce_norm(std::move(g.ln1)), std::move(g.attn), reduce_norm(std::move(g.ln2)), std::move(g.mlp)};
  }

  /// γ ‖ β [1, 2h] Partial → one all_reduce → R, unpacked (h for RMSNorm).
  static typename Norm::template ParamGrads<Replicated> reduce_norm(typename Norm::template ParamGrads<RowSharded> g) {
    const Index h = g.dgamma.cols();
    const Index w = g.dbeta ? 2 * h : h;
    auto packed = B::template zeros<T>(1, w);
    Kernels<B>::place(packed, 0, 0, g.dgamma.local());
    if (g.dbeta) Kernels<B>::place(packed, 0, h, g.dbeta->local());
    const Group grp = g.dgamma.group();
    auto sum = all_reduce(Sharded<T, Partial, B>(std::move(packed), 1, w, grp));
    typename Norm::template ParamGrads<Replicated> out{
        Sharded<T, Replicated, B>(B::copy_block(sum.local(), 0, 0, 1, h), 1, h, grp), std::nullopt};
    if (g.dbeta) out.dbeta = Sharded<T, Replicated, B>(B::copy_block(sum.local(), 0, h, 1, h), 1, h, grp);
    return out;
  }
};

}  // namespace shardalg::nn
