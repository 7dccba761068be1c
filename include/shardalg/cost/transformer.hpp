// shardalg/cost/transformer.hpp — what one transformer layer computes and communicates.
//
// Notation: b batch, s sequence, h hidden, a heads, f = ffn hidden (4h by default),
// T = b·s tokens, e bytes per element, P the tensor-parallel size.
//
// Forward FLOPs of one layer (2 flops per multiply-add; the matmuls only):
//   QKV projection        2·T·h·3h   = 6·T·h²
//   scores Q·Kᵀ           2·b·s²·h
//   probabilities · V     2·b·s²·h
//   output projection     2·T·h·h    = 2·T·h²
//   MLP up and down       2·T·h·f·2  = 16·T·h²  (f = 4h)
//   total                 24·b·s·h² + 4·b·s²·h  (f = 4h)
// The backward pass costs twice the forward (dX and dW for every matmul).
//
// Communication of one layer (two Megatron blocks, attention and MLP), dense buffer T·h·e each:
//   without SP   forward 2 all_reduce               backward 2 all_reduce
//   with SP      forward 2 all_gather + 2 reduce_scatter, backward the same (swapped)
// Both move 4·(P−1)/P·T·h·e bytes per rank per pass: an all-reduce is a reduce-scatter plus an
// all-gather. (SP's norm-weight gradient all-reduces, 2h values per norm once per step, are
// left out: they are per step, not per token.)
#pragma once

#include <cstdint>

#include "shardalg/cost/alpha_beta.hpp"

namespace shardalg::cost {

struct TransformerShape {
  std::int64_t batch = 1;
  std::int64_t seq = 1;
  std::int64_t hidden = 1;
  std::int64_t heads = 1;
  std::int64_t ffn_hidden = 0;  // 0 means 4·hidden
  std::int64_t layers = 1;

  [[nodiscard]] constexpr std::int64_t tokens() const { return batch * seq; }
  [[nodiscard]] constexpr std::int64_t ffn() const { return ffn_hidden == 0 ? 4 * hidden : ffn_hidden; }
  [[nodiscard]] constexpr std::int64_t head_dim() const { return hidden / heads; }
};

// --- FLOPs ---------------------------------------------------------------------------------

/// Forward FLOPs of one layer: 8·T·h² + 4·T·h·f + 4·b·s²·h (= 24·b·s·h² + 4·b·s²·h for f = 4h).
constexpr double layer_forward_flops(const TransformerShape& x) {
  const double T = static_cast<double>(x.tokens()), h = static_cast<double>(x.hidden);
  const double f = static_cast<double>(x.ffn()), b = static_cast<double>(x.batch), s = static_cast<double>(x.seq);
  return 8.0 * T * h * h + 4.0 * T * h * f + 4.0 * b * s * s * h;
}
/// Backward FLOPs of one layer: twice the forward.
constexpr double layer_backward_flops(const TransformerShape& x) { return 2.0 * layer_forward_flops(x); }
/// Every matmul of the layer is split P ways (heads and the FFN columns): each rank does 1/P.
constexpr double layer_forward_flops_per_rank(const TransformerShape& x, int tp) {
  return layer_forward_flops(x) / tp;
}

// --- communication -------------------------------------------------------------------------

/// The collectives of one layer in one pass (forward or backward).
struct LayerComm {
  int all_reduces = 0;
  int all_gathers = 0;
  int reduce_scatters = 0;
  double dense_bytes_each = 0;  // T·h·e: every collective of the layer is about one activation
  double bytes_per_rank = 0;    // sum over the collectives of the ring bytes each rank sends

  [[nodiscard]] constexpr int collectives() const { return all_reduces + all_gathers + reduce_scatters; }
};

/// Activation bytes T·h·e of the tensor each collective moves.
constexpr double activation_bytes(const TransformerShape& x, double element_bytes) {
  return static_cast<double>(x.tokens()) * static_cast<double>(x.hidden) * element_bytes;
}

/// One layer, one pass (forward and backward have the same counts and bytes).
constexpr LayerComm layer_comm(const TransformerShape& x, int tp, double element_bytes, bool sequence_parallel) {
  LayerComm c;
  c.dense_bytes_each = activation_bytes(x, element_bytes);
  if (tp <= 1) return c;
  if (sequence_parallel) {
    c.all_gathers = 2;
    c.reduce_scatters = 2;
    c.bytes_per_rank = 2 * all_gather_bytes_per_rank(c.dense_bytes_each, tp) +
                       2 * reduce_scatter_bytes_per_rank(c.dense_bytes_each, tp);
  } else {
    c.all_reduces = 2;
    c.bytes_per_rank = 2 * all_reduce_bytes_per_rank(c.dense_bytes_each, tp);
  }
  return c;
}

/// Predicted time of one layer's collectives in one pass on `link`.
constexpr double layer_comm_seconds(const TransformerShape& x, int tp, double element_bytes, bool sequence_parallel,
                                    const AlphaBeta& link) {
  const LayerComm c = layer_comm(x, tp, element_bytes, sequence_parallel);
  return c.all_reduces * all_reduce_seconds(link, c.dense_bytes_each, tp) +
         c.all_gathers * all_gather_seconds(link, c.dense_bytes_each, tp) +
         c.reduce_scatters * reduce_scatter_seconds(link, c.dense_bytes_each, tp);
}

// --- compute / communication ratio -----------------------------------------------------------

struct ComputeCommRatio {
  double flops_per_rank = 0;
  double compute_seconds = 0;
  double comm_bytes_per_rank = 0;
  double comm_seconds = 0;
  double ratio = 0;  // compute_seconds / comm_seconds: > 1 compute-bound, < 1 communication-bound

  [[nodiscard]] constexpr bool compute_bound() const { return ratio > 1.0; }
};

/// R for the forward pass of one layer on ranks of `flops_per_second` joined by `link`.
constexpr ComputeCommRatio forward_compute_comm_ratio(const TransformerShape& x, int tp, double element_bytes,
                                                      double flops_per_second, const AlphaBeta& link,
                                                      bool sequence_parallel = false) {
  ComputeCommRatio r;
  r.flops_per_rank = layer_forward_flops_per_rank(x, tp);
  r.compute_seconds = r.flops_per_rank / flops_per_second;
  r.comm_bytes_per_rank = layer_comm(x, tp, element_bytes, sequence_parallel).bytes_per_rank;
  r.comm_seconds = layer_comm_seconds(x, tp, element_bytes, sequence_parallel, link);
  r.ratio = r.comm_seconds > 0 ? r.compute_seconds / r.comm_seconds : 0.0;
  return r;
}

/// The s ≪ h, bandwidth-only, 16-bit limit of R: (24·T·h²/P/F) / (8·(P−1)/P·T·h/β) = 3·h·β / ((P−1)·F).
constexpr double simplified_compute_comm_ratio(double hidden, int tp, double flops_per_second,
                                               double beta_bytes_per_second) {
  return 3.0 * hidden * beta_bytes_per_second / ((tp - 1) * flops_per_second);
}

}  // namespace shardalg::cost
