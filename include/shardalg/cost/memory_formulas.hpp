// shardalg/cost/memory_formulas.hpp — memory per parameter and activation memory per layer.
//
// Mixed-precision Adam keeps, per parameter, for the whole run:
//   16-bit weight 2 + 16-bit gradient 2 + fp32 master weight 4 + Adam m 4 + Adam v 4 = 16 bytes,
// of which 12 are optimizer state and master copy. Data parallelism replicates all 16; tensor
// parallelism of degree P divides them by P (the few replicated norms and biases aside).
//
// Activations saved for the backward pass, per layer (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models": 16-bit activations, 1-byte dropout
// masks, f = 4h, no recomputation):
//   no parallelism        s·b·h · (34 + 5·a·s/h)
//   TP of degree t        s·b·h · (10 + 24/t + 5·a·s/(h·t))   (LayerNorm, dropout, residual inputs replicated)
//   TP + SP               s·b·h · (34 + 5·a·s/h) / t          (everything divided by t)
#pragma once

#include <cstdint>

#include "shardalg/cost/transformer.hpp"
#include "shardalg/cost/units.hpp"

namespace shardalg::cost {

struct MixedPrecisionAdamBytes {
  double weight = 2;  // fp16/bf16 copy the matmuls read
  double grad = 2;    // fp16/bf16 gradient
  double master = 4;  // fp32 master weight
  double adam_m = 4;  // fp32 first moment
  double adam_v = 4;  // fp32 second moment

  [[nodiscard]] constexpr double per_parameter() const { return weight + grad + master + adam_m + adam_v; }
  [[nodiscard]] constexpr double optimizer_and_master() const { return master + adam_m + adam_v; }
};

inline constexpr double mixed_precision_adam_bytes_per_parameter = MixedPrecisionAdamBytes{}.per_parameter();
inline constexpr double optimizer_and_master_bytes_per_parameter = MixedPrecisionAdamBytes{}.optimizer_and_master();

/// Bytes of weights, gradients and optimizer state for `parameters` (activations not included).
constexpr double training_state_bytes(double parameters,
                                      double bytes_per_parameter = mixed_precision_adam_bytes_per_parameter) {
  return parameters * bytes_per_parameter;
}

/// The smallest power-of-two tensor-parallel degree whose per-rank share of the training state
/// (weights, gradients, optimizer; NOT activations) fits `capacity_bytes`; 0 if none up to max_tp.
constexpr int smallest_power_of_two_tp(double parameters, double capacity_bytes,
                                       double bytes_per_parameter = mixed_precision_adam_bytes_per_parameter,
                                       int max_tp = 1 << 16) {
  for (int tp = 1; tp <= max_tp; tp *= 2)
    if (training_state_bytes(parameters, bytes_per_parameter) / tp <= capacity_bytes) return tp;
  return 0;
}

/// Activation bytes saved per layer for the backward pass (Korthikanti et al. 2022).
constexpr double activation_bytes_per_layer(const TransformerShape& x, int tp, bool sequence_parallel) {
  const double sbh = static_cast<double>(x.seq) * static_cast<double>(x.batch) * static_cast<double>(x.hidden);
  const double attn = 5.0 * static_cast<double>(x.heads) * static_cast<double>(x.seq) / static_cast<double>(x.hidden);
  if (tp <= 1) return sbh * (34.0 + attn);
  if (sequence_parallel) return sbh * (34.0 + attn) / tp;
  return sbh * (10.0 + 24.0 / tp + attn / tp);
}

/// The activation held between blocks (the residual stream): T·h·e, divided by P under SP.
constexpr double residual_activation_bytes_per_rank(const TransformerShape& x, int tp, double element_bytes,
                                                    bool sequence_parallel) {
  return activation_bytes(x, element_bytes) / (sequence_parallel && tp > 1 ? tp : 1);
}

/// A parallel LayerNorm on a ColSharded activation all-reduces two statistics per token (Σx and
/// Σx²) in fp32: 2 · T · 4 = 8·b·s bytes.
constexpr double layernorm_statistics_bytes(std::int64_t tokens, double statistic_bytes = fp32_bytes) {
  return 2.0 * static_cast<double>(tokens) * statistic_bytes;
}

}  // namespace shardalg::cost
