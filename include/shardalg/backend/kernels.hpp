// shardalg/backend/kernels.hpp — the local kernels the layers need beyond the core's operations:
// the contract every backend meets (Kernels<B>), and the shapes the kernels share.
//
// The layers never touch a local block's elements directly: the layout algebra (matmul, add,
// map, hadamard, col_sum, the collectives) goes through the core, and the few row-wise or
// index-keyed pieces below go through `Kernels<Backend>`. A backend supplies a specialisation
// with these names: backend/cpu/kernels.hpp (Eigen) and backend/cuda/kernels.cuh (device blocks):
//
//   generate(r, c, f)                      fill a block from f(local row, local col)   (init, load)
//   place(dst, r0, c0, src)                copy a block into a sub-block               (GQA replica sync)
//   row_mean_var(x, center)                two-pass row statistics of whole rows        (LayerNorm/RMSNorm on R, Row)
//   row_power_sums(x)                      (Σx, Σx²) per row of a column block          (parallel LayerNorm, C)
//   mean_var_from_sums(s, n, center)       the finished statistics after the all-reduce
//   norm_apply(x, mv, γ, β, eps, center)   y = x̂·γ + β, and x̂, rstd for the backward
//   norm_grad_sums(dy, x̂, γ)              (Σg, Σg·x̂) per row, g = dy ⊙ γ
//   norm_grad_apply(dy, x̂, γ, rstd, s, n, center)   dx = rstd·(g − Σg/n − x̂·Σg·x̂/n)
//   swiglu(h), swiglu_grad(h, da)          silu(gate) ⊙ up on a [gate | up] block, and its adjoint
//   dropout(x, p, seed, tensor, r0, c0)    the mask as a function of the global index
//   causal_attention(qkv, shape), causal_attention_grad(qkv, probs, dout, shape)
//   causal_attention(qkv, shape, drop), causal_attention_grad(qkv, probs, dout, shape, drop)
//                                          with dropout on the probabilities (AttnDropout below;
//                                          optional: a backend without these overloads refuses
//                                          attention dropout, nn/layers/attention.hpp)
//
// Elementwise activations (GeLU tanh/erf and their derivatives) are plain functors used through
// the core's `map`; a device backend needs them callable on the device (see backend/activation.hpp).
#pragma once

#include <cstdint>

#include "shardalg/base/index.hpp"
#include "shardalg/backend/random.hpp"

namespace shardalg::nn {

/// Local kernels of a backend. Primary template left undefined: a backend must specialise it.
template <class Backend>
struct Kernels;

/// The shape of a local fused-QKV block: `units` groups of (q_per_unit query heads, one K head,
/// one V head), each head `head_dim` wide; rows are batch × seq tokens, batch-major.
struct AttnShape {
  Index batch, seq, units, q_per_unit, head_dim;
  [[nodiscard]] Index unit_width() const { return (q_per_unit + 2) * head_dim; }
  [[nodiscard]] Index out_width() const { return units * q_per_unit * head_dim; }
};

/// Dropout on the attention probabilities, keyed by global indices: P[b, h, i, j] (sequence b,
/// query head h, query i, key j, all global) is kept when
///
///     uniform(seed, tensor, (b·heads + h)·seq + i, j) ≥ p        (backend/random.hpp)
///
/// and scaled by 1/(1 − p). A rank's local head k (the k-th query head of its QKV block) is global
/// head head0 + k, its local sequence b is global batch0 + b; so the mask does not depend on how
/// the heads are split (TP), how the sequences are split (DP) or on grouped K/V. p = 0: inactive.
struct AttnDropout {
  double p = 0.0;
  std::uint64_t seed = 0, tensor = 0;
  Index heads = 0;   // query heads of the whole layer
  Index head0 = 0;   // global index of this rank's first query head
  Index batch0 = 0;  // global index of the local block's first sequence
  [[nodiscard]] bool active() const { return p > 0.0; }
  /// The scale of a kept probability (1/(1 − p)) or 0, at local (sequence b, head k, query i, key j).
  template <class T>
  [[nodiscard]] T factor(Index b, Index k, Index seq, Index i, Index j) const {
    const Index row = ((batch0 + b) * heads + head0 + k) * seq + i;
    return dropout_uniform(seed, tensor, row, j) >= p ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  }
};

}  // namespace shardalg::nn
