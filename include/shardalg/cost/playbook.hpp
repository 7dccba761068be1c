// shardalg/cost/playbook.hpp — the memory formulas of the Ultra-Scale Playbook (Hugging Face,
// "The Ultra-Scale Playbook: Training LLMs on GPU Clusters", 2025, section "Memory usage in
// Transformers"), as constexpr arithmetic, so that measured figures can be printed beside them.
//
//   parameters    N = h·v + L·(12h² + 13h) + 2h
//                 (tied embedding h·v; per layer QKV 3h² + 3h, output h² + h, MLP 8h² + 5h, two
//                 LayerNorms 4h; the final LayerNorm 2h; no position embedding)
//   per parameter mixed precision with Adam: bf16 weight 2 + bf16 gradient 2 + fp32 master 4 +
//                 Adam m 4 + Adam v 4 = 16 bytes; 20 when the gradients are accumulated in fp32
//                 (+4 per parameter)
//   activations   per layer s·b·h·(34 + 5·a·s/h) bytes (16-bit values, 1-byte dropout masks;
//                 Korthikanti et al. 2022, which the Playbook quotes: cost/memory_formulas.hpp), with tensor
//                 parallelism of degree t s·b·h·(10 + 24/t + 5·a·s/(h·t)), with sequence
//                 parallelism too s·b·h·(34 + 5·a·s/h)/t; L layers: L times that
//
// Per rank under tensor parallelism the Playbook divides the parameter terms by t (the
// replicated LayerNorms and row-parallel biases are neglected); `playbook_parameters_per_rank`
// is that N/t. nn/train/measured_memory.hpp measures the library's GPT and reports each figure beside these.
#pragma once

#include <cstdint>

#include "shardalg/cost/memory_formulas.hpp"
#include "shardalg/cost/transformer.hpp"

namespace shardalg::cost {

/// N = h·v + L·(12h² + 13h) + 2h.
constexpr double playbook_parameters(std::int64_t hidden, std::int64_t vocab, std::int64_t layers) {
  const double h = static_cast<double>(hidden), v = static_cast<double>(vocab), L = static_cast<double>(layers);
  return h * v + L * (12.0 * h * h + 13.0 * h) + 2.0 * h;
}

/// The Playbook's per-rank share under tensor parallelism of degree `tp`: N / tp.
constexpr double playbook_parameters_per_rank(std::int64_t hidden, std::int64_t vocab, std::int64_t layers, int tp) {
  return playbook_parameters(hidden, vocab, layers) / (tp < 1 ? 1 : tp);
}

/// Bytes per parameter, mixed-precision Adam: what each copy costs.
struct PlaybookBytesPerParameter {
  double weight = 2;      // bf16 weight the matmuls read
  double grad = 2;        // bf16 gradient
  double master = 4;      // fp32 master weight
  double adam_m = 4;      // fp32 first moment
  double adam_v = 4;      // fp32 second moment
  double grad_fp32 = 0;   // 4 with fp32 gradient accumulation

  [[nodiscard]] constexpr double gradients() const { return grad + grad_fp32; }
  [[nodiscard]] constexpr double optimizer() const { return master + adam_m + adam_v; }
  [[nodiscard]] constexpr double total() const { return weight + gradients() + optimizer(); }
};

/// 16 bytes per parameter; 20 with fp32 gradient accumulation.
constexpr PlaybookBytesPerParameter playbook_bytes_per_parameter(bool fp32_grad_accumulation = false) {
  PlaybookBytesPerParameter b;
  if (fp32_grad_accumulation) b.grad_fp32 = 4;
  return b;
}

/// Activation bytes of `layers` layers per rank: the per-layer formula (cost/memory_formulas.hpp) × L.
constexpr double playbook_activation_bytes(const TransformerShape& x, int tp = 1, bool sequence_parallel = false) {
  return static_cast<double>(x.layers) * activation_bytes_per_layer(x, tp, sequence_parallel);
}

}  // namespace shardalg::cost
