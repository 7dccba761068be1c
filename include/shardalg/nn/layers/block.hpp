// shardalg/nn/layers/block.hpp — the pre-LN transformer block (no sequence parallelism):
//
//   X[R] → LN1 → A[R] → Attention → Z1[R] → dropout → + X → Y1[R]
//   Y1[R] → LN2 → M[R] → MLP → Z2[R] → dropout → + Y1 → Y[R]
//
// (attn_dropout > 0: the attention also drops softmax probabilities, keyed by global head and
// sequence: local, the same mask at every TP size; nn/layers/attention.hpp.)
// LayerNorm, dropout and the residual adds run redundantly on every rank on replicated values;
// only the two sub-layers communicate. Ledger, per block: forward 2 all_reduce of T·h (the g of
// the attention projection and of fc2), backward 2 all_reduce of T·h (the f of the fused QKV and
// of fc1), nothing else (with grouped-query attention whose groups are fewer than the ranks, the
// backward adds the K/V replica sync, scope "kv_replica_sync").
//
// Backward: dY[R] → dropout → MLP (dX: Partial → all_reduce → R) → LN2 → + dY → dY1[R]
//           dY1 → dropout → Attention (dX: Partial → all_reduce → R) → LN1 → + dY1 → dX[R]
// The norm-weight gradients are R (the norms ran redundantly on replicated input), so every
// parameter gradient goes to sgd_update as it is.
#pragma once

#include <optional>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/cost/recompute.hpp"
#include "shardalg/nn/layers/attention.hpp"
#include "shardalg/nn/layers/dropout.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/nn/layers/norm.hpp"

namespace shardalg::nn {

/// Activation recomputation (cost/recompute.hpp): what a block keeps from its forward for its backward.
///   none       every cache (the norms' x̂, QKV, P, the MLP's inputs and pre-activation)
///   selective  all but the attention's s × s probabilities P, recomputed from QKV in the backward
///   full       the block's input X only; the backward runs the forward again (its collectives too)
/// Dropout masks are functions of (seed, tensor, global index), so a recomputed forward is the
/// stored one bit for bit, and so are the gradients.
using cost::Recompute;

struct BlockConfig {
  Index hidden = 0;
  Index heads = 0;
  Index groups = 0;  // 0: heads
  Index seq = 0;
  Index ffn = 0;
  Activation act = Activation::gelu_tanh;
  NormKind norm = NormKind::layer;
  bool bias = true;
  double eps = 1e-5;
  double dropout = 0.0;  // hidden dropout after each sub-layer, before the residual add
  std::uint64_t dropout_seed = 0;
  std::uint32_t layer = 0;  // keys the dropout masks (and, through InitConfig, the weights)
  double attn_dropout = 0.0;  // dropout on the attention probabilities (nn/layers/attention.hpp), same seed
  Recompute recompute = Recompute::none;

  [[nodiscard]] AttentionConfig attention() const {
    return {hidden, heads, groups, seq, bias, attn_dropout, dropout_seed, layer};
  }
  [[nodiscard]] MlpConfig mlp() const { return {hidden, ffn, act, bias}; }
};

namespace detail {
/// A scope label on the group's recorder, if it has one.
inline RecorderScope maybe_scope(const Group& g, const char* label) { return shardalg::scope(g, label); }
}  // namespace detail

/// Dense masters for TransformerBlock::from_dense.
template <class M>
struct BlockMasters {
  const M *ln1_gamma, *ln1_beta;
  AttentionMasters<M> attn;
  const M *ln2_gamma, *ln2_beta;
  MlpMasters<M> mlp;
};

namespace detail {
/// What the plain and the sequence-parallel block share: the parameters (two norms, attention,
/// MLP), the two dropouts, and how they are made. `Derived` supplies `check` and the passes.
template <class Derived, Element T, class B>
class BlockParts {
 public:
  using Norm = LayerNorm<T, B>;
  using Attn = Attention<T, B>;
  using MlpT = Mlp<T, B>;

  /// Megatron init: normal(0, std), residual output projections std/√(2L), zero biases, γ = 1.
  /// Index-keyed, so the same parameters at every TP size.
  static Derived init(const BlockConfig& c, const Group& g, InitConfig ic) {
    Derived::check(c, g.size());
    ic.layer = c.layer;
    return Derived(c, Norm::init(c.hidden, c.norm, g, T(c.eps)), Attn::init(c.attention(), g, ic),
                   Norm::init(c.hidden, c.norm, g, T(c.eps)), MlpT::init(c.mlp(), g, ic));
  }

  template <class M>
  static Derived from_dense(const BlockConfig& c, const BlockMasters<M>& m, const Group& g) {
    Derived::check(c, g.size());
    constexpr std::string_view at = "TransformerBlock.from_dense";
    detail::require_master(at, "ln1_gamma", m.ln1_gamma, true, 1, c.hidden);
    detail::require_master(at, "ln2_gamma", m.ln2_gamma, true, 1, c.hidden);
    return Derived(c, Norm::from_dense(*m.ln1_gamma, m.ln1_beta, c.norm, g, T(c.eps)),
                   Attn::from_dense(c.attention(), m.attn, g),
                   Norm::from_dense(*m.ln2_gamma, m.ln2_beta, c.norm, g, T(c.eps)), MlpT::from_dense(c.mlp(), m.mlp, g));
  }

  BlockParts(const BlockConfig& c, Norm ln1, Attn attn, Norm ln2, MlpT mlp)
      : cfg_(c),
        ln1_(std::move(ln1)),
        attn_(std::move(attn)),
        ln2_(std::move(ln2)),
        mlp_(std::move(mlp)),
        drop_attn_(c.dropout, c.dropout_seed, tensor_id(c.layer, TensorKind::dropout_attn)),
        drop_mlp_(c.dropout, c.dropout_seed, tensor_id(c.layer, TensorKind::dropout_mlp)) {
    attn_.set_recompute_core(c.recompute == Recompute::selective);
  }

  [[nodiscard]] const BlockConfig& config() const { return cfg_; }
  [[nodiscard]] const Norm& ln1() const { return ln1_; }
  [[nodiscard]] const Attn& attention() const { return attn_; }
  [[nodiscard]] const Norm& ln2() const { return ln2_; }
  [[nodiscard]] const MlpT& mlp() const { return mlp_; }
  // Mutable access for optimizers and checkpoint loading (nn/models/gpt.hpp).
  Norm& ln1() { return ln1_; }
  Attn& attention() { return attn_; }
  Norm& ln2() { return ln2_; }
  MlpT& mlp() { return mlp_; }
  /// The global row of this rank's first token (data parallelism: the replica's offset).
  void set_dropout_row_base(Index base) {
    drop_attn_.row_base = base;
    drop_mlp_.row_base = base;
    attn_.set_dropout_row_base(base);
  }
  /// Context parallelism over `cp`: the rows are this rank's chunks of every sequence
  /// (nn/layers/cp_tokens.hpp); attention runs over cp, the dropout masks are taken at the chunks'
  /// global rows. Everything else in the block is token-wise and unchanged.
  void set_context_parallel(const Group& cp, CpAlgo algo = CpAlgo::ring) {
    attn_.set_context_parallel(cp, algo);
    drop_attn_.cp = drop_mlp_.cp = Dropout::CpRows{cfg_.seq, cp.size(), cp.rank()};
  }
  /// Y = block(X), Derived::forward_stored; under Recompute::full the cache is X alone (the
  /// backward and restore run the forward again).
  template <class D = Derived>
  typename D::Forward forward(const typename D::Input& x) const {
    auto f = static_cast<const D&>(*this).forward_stored(x);
    if (cfg_.recompute == Recompute::full) {
      typename D::Cache c;
      c.input = x;
      f.cache = std::move(c);
    }
    return f;
  }
  /// Full recomputation: the caches again from the kept input (bit for bit the stored forward's,
  /// its collectives included); a cache that is not a kept input is returned as it is.
  template <class D = Derived>
  typename D::Cache restore(const typename D::Cache& c) const {
    return c.input ? static_cast<const D&>(*this).forward_stored(*c.input).cache : c;
  }

  /// What the forward keeps for the backward (see Recompute).
  [[nodiscard]] Recompute recompute() const { return cfg_.recompute; }
  void set_recompute(Recompute r) {
    cfg_.recompute = r;
    attn_.set_recompute_core(r == Recompute::selective);
  }
  /// The two hidden-dropout sites (after attention, after the MLP), as the block applies them.
  [[nodiscard]] const Dropout& attn_dropout() const { return drop_attn_; }
  [[nodiscard]] const Dropout& mlp_dropout() const { return drop_mlp_; }
  /// The dropout masks' seed (vary it per step: a mask is a function of (seed, tensor, index)).
  void set_dropout_seed(std::uint64_t seed) {
    cfg_.dropout_seed = seed;
    drop_attn_.seed = drop_mlp_.seed = seed;
    attn_.set_dropout_seed(seed);
  }

  /// Plain SGD on every parameter. For the sequence-parallel block, handed its unreduced
  /// gradients it does not compile: the norms' update refuses a Partial gradient ([shardalg.E130]).
  template <class G>
  void sgd(const G& g, T lr) {
    ln1_.sgd(g.ln1, lr);
    attn_.sgd(g.attn, lr);
    ln2_.sgd(g.ln2, lr);
    mlp_.sgd(g.mlp, lr);
  }

 protected:
  BlockConfig cfg_;
  Norm ln1_;
  Attn attn_;
  Norm ln2_;
  MlpT mlp_;
  Dropout drop_attn_, drop_mlp_;
};
}  // namespace detail

namespace detail {
/// What the block's backward leaves beside the sub-layers' own results: the input gradient and
/// the two norms' parameter gradients.
template <class X, class NormGrads>
struct BlockBackward {
  X dx;
  NormGrads ln1, ln2;
};

/// The block's backward, written once for every form of it:
///
///   dY → dropout′ → MLP′ → LN2′, + dY (one sweep) → dY1 → dropout′ → attention′ → LN1′, + dY1 → dX
///
/// `mlp(cache, d)` and `attn(cache, d)` take the dropout's input gradient d (in the stream's
/// layout X) through the sub-layer and return its input gradient in X, communicating as they
/// must; the fused backward of TransformerBlock (f's all_reduce inside the layer), the
/// sequence-parallel one (all_gather in, reduce_scatter out) and the split form's B
/// (nn/layers/split_backward.hpp: input gradients only, the output gradients kept for W) differ
/// only there, and keep what they need of the sub-layer's results themselves.
template <class Blk, class Cache, class X, class Mlp, class Attn>
auto block_backward(const Blk& blk, const Cache& c, const X& dy, const Dropout& drop_attn, const Dropout& drop_mlp,
                    Mlp&& mlp, Attn&& attn) {
  X dm = [&] {
    auto s = maybe_scope(dy.group(), "mlp");
    return mlp(c.mlp, drop_mlp.backward(dy));
  }();
  auto gl2 = blk.ln2().backward_add(c.ln2, dm, dy);  // dY1 = dY + LN2′(dX_mlp), in LN2's sweep
  X dy1 = std::move(gl2.dx);
  X da = [&] {
    auto s = maybe_scope(dy.group(), "attn");
    return attn(c.attn, drop_attn.backward(dy1));
  }();
  auto gl1 = blk.ln1().backward_add(c.ln1, da, dy1);  // dX = dY1 + LN1′(dX_attn)
  return BlockBackward<X, decltype(gl1.params)>{std::move(gl1.dx), std::move(gl1.params), std::move(gl2.params)};
}
}  // namespace detail

template <Element T, class B = CpuBackend>
class TransformerBlock : public detail::BlockParts<TransformerBlock<T, B>, T, B> {
  using Parts = detail::BlockParts<TransformerBlock<T, B>, T, B>;
  using Parts::attn_, Parts::drop_attn_, Parts::drop_mlp_, Parts::ln1_, Parts::ln2_, Parts::mlp_;

 public:
  using typename Parts::Attn;
  using typename Parts::MlpT;
  using typename Parts::Norm;
  using Parts::Parts;
  using Input = Sharded<T, Replicated, B>;

  struct Cache {
    typename Norm::template Cache<Replicated> ln1;
    typename Attn::Cache attn;
    typename Norm::template Cache<Replicated> ln2;
    typename MlpT::Cache mlp;
    std::optional<Input> input;  // Recompute::full: the block's input only, the fields above empty
  };
  struct Forward {
    Input y;
    Cache cache;
  };
  struct ParamGrads {
    typename Norm::template ParamGrads<Replicated> ln1;
    typename Attn::ParamGrads attn;
    typename Norm::template ParamGrads<Replicated> ln2;
    typename MlpT::ParamGrads mlp;
  };
  struct Grads {
    Input dx;
    ParamGrads params;
  };

  static void check(const BlockConfig& c, int p) {
    Attn::check(c.attention(), p);
    MlpT::check(c.mlp(), p);
  }

  /// The forward with every cache kept (BlockParts::forward, without full recomputation).
  Forward forward_stored(const Input& x) const {
    auto l1 = ln1_.forward(x);
    // Each sub-layer up to g (its all-reduce); the output bias is added in the residual's pass:
    // x + dropout(z + b) (Dropout::forward_bias_add).
    auto a = [&] {
      auto s = detail::maybe_scope(x.group(), "attn");
      auto f = attn_.forward_partial(l1.y);
      return std::pair{reduce_from(std::move(f.z)), std::move(f.cache)};  // g → R
    }();
    Input y1 = residual_add(drop_attn_, x, a.first, attn_.proj());
    auto l2 = ln2_.forward(y1);
    auto m = [&] {
      auto s = detail::maybe_scope(x.group(), "mlp");
      auto f = mlp_.forward_partial(l2.y);
      return std::pair{reduce_from(std::move(f.z)), std::move(f.cache)};
    }();
    Input y = residual_add(drop_mlp_, y1, m.first, mlp_.fc2());
    return {std::move(y), Cache{std::move(l1.cache), std::move(a.second), std::move(l2.cache), std::move(m.second), std::nullopt}};
  }

  /// Overlap each f's backward all-reduce (QKV, fc1) with its weight-gradient GEMM.
  void set_overlap(OverlapConfig o) {
    attn_.set_overlap(o);
    mlp_.set_overlap(o);
  }

  /// detail::block_backward with the layers' own backward passes (f's all_reduce inside each).
  Grads backward(const Cache& c, const Input& dy) const {
    if (c.input) return backward(forward_stored(*c.input).cache, dy);  // full recomputation
    ParamGrads p;
    auto r = detail::block_backward(
        *this, c, dy, drop_attn_, drop_mlp_,
        [&](const auto& cm, const Input& d) {
          auto g = mlp_.backward(cm, d);
          p.mlp = std::move(g.params);
          return std::move(g.dx);
        },
        [&](const auto& ca, const Input& d) {
          auto g = attn_.backward(ca, d);
          p.attn = std::move(g.params);
          return std::move(g.dx);
        });
    p.ln1 = std::move(r.ln1);
    p.ln2 = std::move(r.ln2);
    return {std::move(r.dx), std::move(p)};
  }

 private:
  /// x + dropout(z + b), b the row-parallel layer's output bias when it has one.
  template <class Lin>
  static Input residual_add(const Dropout& d, const Input& x, const Input& z, const Lin& lin) {
    if (lin.bias()) return d.forward_bias_add(x, z, *lin.bias());
    return d.forward_add(x, z);
  }
};

}  // namespace shardalg::nn
