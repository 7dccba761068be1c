// shardalg/nn/layers/mlp.hpp — the Megatron MLP: column-parallel fc1, activation, row-parallel fc2.
//
//   forward   f: X[R];  X[R] · W1[C] + b1[C] → H[C];  act(H)[C] → A[C]   (GeLU: map; SwiGLU: local
//             silu(gate) ⊙ up on each rank's [gate_r | up_r] block); the bias add and the
//             activation are one pass (backend/cpu/fused.hpp: Megatron's bias_activation_fusion)
//             A[C] · W2[Row] → Z[Partial];  g: all_reduce → Z[R];  + b2[R]
//   backward  dZ[R];  dA = dZ[R] · W2ᵀ[C] → dA[C];  dW2 = Aᵀ[Row] · dZ[R] → dW2[Row];  db2 → R
//             dH = dA ⊙ act'(H) → dH[C] (SwiGLU: the local adjoint of the gated product), and
//             db1 = col_sum(dH) in the same pass (backend/cpu/fused.hpp)
//             dX = dH[C] · W1ᵀ[Row] → Partial;  f's adjoint: all_reduce → dX[R]
//             dW1 = Xᵀ[R] · dH[C] → C;  db1 → C
//   communication: one all_reduce of T·h forward (g), one backward (f).
//
// SwiGLU's fc1 is one column-parallel weight [h, 2F] whose physical column blocks interleave the
// logical gate and up projections (Megatron's stride-2 layout): rank r holds [gate_r | up_r], so the
// gated product is local. `swiglu_fc1_map` is the physical → logical column map.
#pragma once

#include "shardalg/core/elementwise.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/backend/cpu/fused.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/nn/layers/linear.hpp"

namespace shardalg::nn {

struct MlpConfig {
  Index hidden = 0;
  Index ffn = 0;
  Activation act = Activation::gelu_tanh;
  bool bias = true;
};

/// SwiGLU fc1 [h, 2F] on p ranks: physical column c → (0: gate | 1: up, logical column).
struct SwigluFc1Map {
  Index ffn;
  int p;
  LogicalCol operator()(Index c) const {
    const Index half = ffn / p, r = c / (2 * half), o = c % (2 * half);
    return o < half ? LogicalCol{0, r * half + o} : LogicalCol{1, r * half + o - half};
  }
};

/// Dense masters for Mlp::from_dense (logical layout; bias pointers null when cfg.bias is false).
template <class M>
struct MlpMasters {
  const M* w1;  // [h, F]: fc1, or SwiGLU's gate
  const M* b1;
  const M* w_up;  // [h, F]: SwiGLU's up (else null)
  const M* b_up;
  const M* w2;  // [F, h]
  const M* b2;
};

template <Element T, class B = CpuBackend>
class Mlp {
 public:
  using Fc1 = ColumnParallelLinear<T, B>;
  using Fc2 = RowParallelLinear<T, B>;
  using Input = Sharded<T, Replicated, B>;

  struct Cache {
    typename Fc1::Cache fc1;
    Sharded<T, ColSharded, B> h;  // pre-activation
    typename Fc2::Cache fc2;
  };
  struct Forward {
    Input z;
    Cache cache;
  };
  struct ParamGrads {
    typename Fc1::ParamGrads fc1;
    typename Fc2::ParamGrads fc2;
  };
  struct Grads {
    Input dx;
    ParamGrads params;
  };
  /// Sequence parallelism finishes the two ends itself (see nn/layers/sp_block.hpp):
  struct PartialForward {
    Sharded<T, Partial, B> z;  // A[C] · W2[Row], before g and before b2
    Cache cache;
  };
  struct PartialGrads {
    Sharded<T, Partial, B> dx;  // dH[C] · W1ᵀ[Row], before f's all-reduce
    ParamGrads params;
  };

  /// Any ffn size splits in balanced blocks, except under SwiGLU: its fused [gate | up] weight
  /// interleaves one block of each per rank (SwigluFc1Map), so there F must divide by P.
  static void check(const MlpConfig& cfg, int p) {
    if (cfg.act == Activation::swiglu) detail::require_divisible("Mlp (SwiGLU)", "ffn size", cfg.ffn, p);
  }

  /// Megatron init: fc1 (and up) normal(0, std), fc2 normal(0, std/√(2L)), zero biases.
  static Mlp init(const MlpConfig& cfg, const Group& g, const InitConfig& ic) {
    check(cfg, g.size());
    const auto n = ic.normal();
    const auto n_out = ic.scaled_output();
    const std::uint64_t id1 = ic.id(TensorKind::mlp_fc1), id_up = ic.id(TensorKind::mlp_up);
    const int p = g.size();
    auto zero = [](Index) { return 0.0; };
    auto fc1 = cfg.act == Activation::swiglu
                   ? Fc1::make(cfg.hidden, 2 * cfg.ffn, cfg.bias, g,
                               [&](Index i, Index j) {
                                 const auto lc = SwigluFc1Map{cfg.ffn, p}(j);
                                 return n(lc.part == 0 ? id1 : id_up, i, lc.col);
                               },
                               zero, "Mlp.fc1")
                   : Fc1::make(cfg.hidden, cfg.ffn, cfg.bias, g, [&](Index i, Index j) { return n(id1, i, j); },
                               zero, "Mlp.fc1");
    auto fc2 = Fc2::make(cfg.ffn, cfg.hidden, cfg.bias, g,
                         [&](Index i, Index j) { return n_out(ic.id(TensorKind::mlp_fc2), i, j); }, zero, "Mlp.fc2");
    return Mlp(cfg, std::move(fc1), std::move(fc2));
  }

  /// Shard dense logical masters (interleaving SwiGLU's gate and up).
  template <class M>
  static Mlp from_dense(const MlpConfig& cfg, const MlpMasters<M>& m, const Group& g) {
    check(cfg, g.size());
    const int p = g.size();
    const bool glu = cfg.act == Activation::swiglu;
    constexpr std::string_view at = "Mlp.from_dense", no_up = "the activation is not SwiGLU (no up projection)";
    const Index h = cfg.hidden, F = cfg.ffn;
    detail::require_master(at, "w1", m.w1, true, h, F);
    detail::require_master(at, "b1", m.b1, cfg.bias, 1, F);
    detail::require_master(at, "w_up", m.w_up, glu, h, F, no_up);
    detail::require_master(at, "b_up", m.b_up, glu && cfg.bias, 1, F, glu ? "the config has no bias" : no_up);
    detail::require_master(at, "w2", m.w2, true, F, h);
    detail::require_master(at, "b2", m.b2, cfg.bias, 1, h);
    const SwigluFc1Map map{cfg.ffn, p};
    auto fc1 = Fc1::make(
        cfg.hidden, glu ? 2 * cfg.ffn : cfg.ffn, cfg.bias, g,
        [&](Index i, Index j) {
          const auto lc = glu ? map(j) : LogicalCol{0, j};
          return (lc.part == 0 ? *m.w1 : *m.w_up)(i, lc.col);
        },
        [&](Index j) {
          const auto lc = glu ? map(j) : LogicalCol{0, j};
          return (lc.part == 0 ? *m.b1 : *m.b_up)(0, lc.col);
        },
        "Mlp.fc1");
    auto fc2 = Fc2::make(cfg.ffn, cfg.hidden, cfg.bias, g, [&](Index i, Index j) { return (*m.w2)(i, j); },
                         [&](Index j) { return (*m.b2)(0, j); }, "Mlp.fc2");
    return Mlp(cfg, std::move(fc1), std::move(fc2));
  }

  Mlp(const MlpConfig& cfg, Fc1 fc1, Fc2 fc2) : cfg_(cfg), fc1_(std::move(fc1)), fc2_(std::move(fc2)) {}

  [[nodiscard]] const MlpConfig& config() const { return cfg_; }
  [[nodiscard]] const Fc1& fc1() const { return fc1_; }
  [[nodiscard]] const Fc2& fc2() const { return fc2_; }
  Fc1& fc1() { return fc1_; }
  Fc2& fc2() { return fc2_; }

  Forward forward(const Input& x) const {
    auto f = forward_partial(x);
    return {fc2_.add_output_bias(reduce_from(std::move(f.z))), std::move(f.cache)};  // g → R; + b2
  }
  /// X[R] → Z[Partial]: everything but g and b2 (added by fc2().add_output_bias).
  PartialForward forward_partial(const Input& x) const {
    detail::require_cols("Mlp", x.cols(), cfg_.hidden);
    // f inside: X[R] · W1[C] → Y[C]; with the backend's epilogue H = Y + b1 and A = act(H) come
    // from the GEMM itself (CUDA: cuBLASLt), else one pass makes them (H in place of Y).
    auto [f1, fused_a] = fc1_.forward_bias_act(x, cfg_.act);
    Sharded<T, ColSharded, B> a = fused_a ? std::move(*fused_a) : bias_activate(f1.y);
    auto f2 = fc2_.forward_partial(a);  // A[C] · W2[Row] → Partial
    return {std::move(f2.z), Cache{std::move(f1.cache), std::move(f1.y), std::move(f2.cache)}};
  }

  Grads backward(const Cache& c, const Input& dz) const {
    auto g2 = fc2_.backward(c.fc2, dz);  // dA[C], dW2[Row], db2[R]
    auto [dh, db1] = activate_grad(c.h, std::move(g2.dh));  // dH = dA ⊙ act'(H) and db1 = Σ dH: one pass
    auto g1 = fc1_.backward(c.fc1, dh, std::move(db1));  // f's adjoint: all_reduce → dX[R] (overlapped with dW1 if set)
    return {std::move(g1.dx), {std::move(g1.params), std::move(g2.params)}};
  }
  /// Overlap f's backward all-reduce with fc1's weight-gradient GEMM (ColumnParallelLinear).
  void set_overlap(OverlapConfig o) { fc1_.set_overlap(o); }
  /// dZ[R] (the whole cotangent) → dX[Partial] before f's all-reduce, and the parameter gradients.
  PartialGrads backward_partial(const Cache& c, const Input& dz) const {
    auto g2 = fc2_.backward(c.fc2, dz);  // dA[C], dW2[Row], db2[R]
    auto [dh, db1] = activate_grad(c.h, std::move(g2.dh));
    auto g1 = fc1_.backward_partial(c.fc1, dh, std::move(db1));  // dX[Partial]
    return {std::move(g1.dx), {std::move(g1.params), std::move(g2.params)}};
  }

  void sgd(const ParamGrads& g, T lr) {
    fc1_.sgd(g.fc1, lr);
    fc2_.sgd(g.fc2, lr);
  }

 private:
  using Col = Sharded<T, ColSharded, B>;
  /// Y[C] (fc1's product) → H = Y + b1 in place (kept for the backward), A = act(H) (SwiGLU: the
  /// gated product, [T, F/P]): nn::Fused's bias_act, one pass.
  Col bias_activate(Col& y) const {
    const auto& b = fc1_.bias();
    auto e = explain_op(y.group(), "bias_act", dtype_of<T>, {"act(", note(y), " + 1·b[C]) → ", note(y.rows(), act_cols(y), LayoutKind::col)});
    auto a = Fused<B>::bias_act(y.local(), b ? &b->local() : nullptr, cfg_.act);
    return Col(std::move(a), y.rows(), act_cols(y), y.group());
  }
  Index act_cols(const Col& h) const { return cfg_.act == Activation::swiglu ? cfg_.ffn : h.cols(); }
  /// dA[C] → dH[C] = dA ⊙ act'(H) (SwiGLU: the gated product's adjoint) and, with a bias, db1 =
  /// col_sum(dH) → C, in one pass (nn::Fused's act_grad).
  std::pair<Col, std::optional<typename Fc1::Bias>> activate_grad(const Col& h, Col da) const {
    const Group& g = shardalg::detail::result_group(h.group(), da.group(), "act_grad");  // as hadamard's
    auto e = explain_op(g, "act_grad", dtype_of<T>, {note(da), " ⊙ act'(", note(h), ") → ", note(h)});
    // With the backend's GEMM epilogues fc1's weight-gradient GEMM sums db1 itself (BGRADA).
    const bool bias = fc1_.bias().has_value() && !detail::FusedEpilogues<T, B>;
    typename B::template matrix<T> db;
    auto dh = Fused<B>::act_grad(h.local(), std::move(da).local(), cfg_.act, bias ? &db : nullptr);
    Col dhs(std::move(dh), h.rows(), h.cols(), g);
    std::optional<typename Fc1::Bias> dbs;
    if (bias) dbs.emplace(std::move(db), 1, h.cols(), g);
    return {std::move(dhs), std::move(dbs)};
  }

  MlpConfig cfg_;
  Fc1 fc1_;
  Fc2 fc2_;
};

}  // namespace shardalg::nn
