// shardalg/cost/training_per_rank.hpp — memory and communication per rank of one training
// setting: DP × TP × PP, ZeRO stage 0–3, activation recomputation (none, selective, full) and
// sequence parallelism, for a GPT-shaped model (the Playbook's parameter count, cost/playbook.hpp).
//
// Notation: N parameters, t = tp, p = pp, N_d = dp, Ψ = N/(t·p) the parameters one rank's
// model-parallel slice holds (the Playbook's N/t, with the layers split p ways; the replicated
// norms and biases, and the embedding living on the first and last stage, are neglected).
//
// Model states, mixed precision with Adam (ZeRO, Rajbhandari et al. 2020):
//   stage 0   2Ψ + 2Ψ + 12Ψ              = 16Ψ          weights, gradients, master + m + v
//   stage 1   2Ψ + 2Ψ + 12Ψ/N_d                         the optimizer states partitioned over dp
//   stage 2   2Ψ + 2Ψ/N_d + 12Ψ/N_d                     and the gradients
//   stage 3   (2Ψ + 2Ψ + 12Ψ)/N_d        = 16Ψ/N_d      and the weights
//
// Activations saved per layer and rank, for one micro-batch of b sequences of s tokens
// (Korthikanti et al. 2022, Table 2; 16-bit values, 1-byte dropout masks, f = 4h):
//   none        sbh(34 + 5as/h); with TP sbh(10 + 24/t + 5as/(ht)); with TP + SP sbh(34 + 5as/h)/t
//   selective   the attention core recomputed (its 5as/h term gone): 34sbh; sbh(10 + 24/t); 34sbh/t
//   full        the layer's input only: 2sbh; with TP + SP 2sbh/t (the input is stored as its
//               sequence shard)
// The first pipeline stage (1F1B, m micro-batches) holds min(p, m) micro-batches of its L/p layers.
// The embedding's and the loss's activations are not counted.
//
// Communication, bytes each rank sends per step (ring algorithms, cost/alpha_beta.hpp), 16-bit:
//   tp   per micro-batch and layer of the stage, cost/transformer.hpp's layer_comm per pass:
//        2 passes (forward, backward), 3 with full recomputation (the forward runs again)
//   dp   stages 0–2: 2(N_d − 1)/N_d · 2Ψ (an all-reduce of the 16-bit gradients; stages 1–2 do a
//        reduce-scatter of them and an all-gather of the weights: the same bytes);
//        stage 3: 3(N_d − 1)/N_d · 2Ψ (the weights all-gathered for the forward and again for the
//        backward, the gradients reduce-scattered), once per step
//   pp   an interior stage sends each micro-batch's output forward and its input gradient back:
//        2m · sbh·2/t (each tp rank sends its 1/t: the SP shard, or Megatron's scatter of the
//        replicated activation); 0 at p = 1
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "shardalg/base/errors.hpp"
#include "shardalg/cost/alpha_beta.hpp"
#include "shardalg/cost/memory_formulas.hpp"
#include "shardalg/cost/playbook.hpp"
#include "shardalg/cost/recompute.hpp"
#include "shardalg/cost/transformer.hpp"

namespace shardalg::cost {

/// A GPT-shaped model: hidden, layers, heads, vocabulary, sequence length.
struct NamedModel {
  std::string_view name;
  std::int64_t hidden = 1, layers = 1, heads = 1, vocab = 1, seq = 1;

  /// N = h·v + L(12h² + 13h) + 2h (cost/playbook.hpp).
  [[nodiscard]] constexpr double parameters() const { return playbook_parameters(hidden, vocab, layers); }
};

/// GPT-3 175B (Brown et al. 2020): h 12288, 96 layers, 96 heads, vocabulary 50257, sequence 2048.
inline constexpr NamedModel gpt3_175b{"gpt3-175b", 12288, 96, 96, 50257, 2048};
/// Megatron-LM's 8.3B: h 3072, 72 layers, 32 heads, vocabulary 51200 (padded), sequence 1024.
inline constexpr NamedModel megatron_8_3b{"megatron-8.3b", 3072, 72, 32, 51200, 1024};


/// Activation bytes saved per layer and rank (Korthikanti et al. 2022, Table 2).
constexpr double activation_bytes_per_layer(const TransformerShape& x, int tp, bool sequence_parallel, Recompute r) {
  const double sbh = static_cast<double>(x.seq) * static_cast<double>(x.batch) * static_cast<double>(x.hidden);
  const bool sp = sequence_parallel && tp > 1;
  switch (r) {
    case Recompute::none:
      return activation_bytes_per_layer(x, tp, sequence_parallel);
    case Recompute::selective:
      if (tp <= 1) return 34.0 * sbh;
      return sp ? 34.0 * sbh / tp : sbh * (10.0 + 24.0 / tp);
    case Recompute::full:
      return 2.0 * sbh / (sp ? tp : 1);
  }
  return 0;
}

/// Model-state bytes per rank for Ψ parameters, ZeRO stage 0–3 over dp ranks.
struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer = 0;  // optimizer: fp32 master, Adam m and v

  [[nodiscard]] constexpr double total() const { return weights + gradients + optimizer; }
};

constexpr ModelStateBytes zero_model_state_bytes(double psi, int dp, int stage,
                                                 const PlaybookBytesPerParameter& b = playbook_bytes_per_parameter()) {
  const double n = dp < 1 ? 1 : dp;
  return {b.weight * psi / (stage >= 3 ? n : 1), b.gradients() * psi / (stage >= 2 ? n : 1),
          b.optimizer() * psi / (stage >= 1 ? n : 1)};
}

/// Bytes each rank sends over dp per step: 2(N_d − 1)/N_d · 2Ψ, or 3(N_d − 1)/N_d · 2Ψ at stage 3.
constexpr double zero_dp_bytes_per_rank(double psi, int dp, int stage, double grad_bytes = bf16_bytes) {
  const double ring = all_reduce_bytes_per_rank(grad_bytes * psi, dp);  // 2(N_d − 1)/N_d · 2Ψ
  return stage >= 3 ? 1.5 * ring : ring;
}

/// One training setting: mesh sizes, ZeRO stage, recomputation, SP, micro-batches.
struct TrainingSetting {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;  // 0–3
  Recompute recompute = Recompute::none;
  bool sequence_parallel = false;
  std::int64_t micro_batch = 1;    // sequences per micro-batch
  std::int64_t micro_batches = 1;  // per step and dp rank (global batch dp · m · b)
};

/// Throws DivisibilityError naming the values unless the setting fits the model.
inline void check_training_setting(const NamedModel& m, const TrainingSetting& s) {
  using detail::cat;
  if (s.dp < 1 || s.tp < 1 || s.pp < 1 || s.micro_batch < 1 || s.micro_batches < 1)
    throw DivisibilityError(cat("dp ", s.dp, ", tp ", s.tp, ", pp ", s.pp, ", micro-batch ", s.micro_batch,
                                " and micro-batches ", s.micro_batches, " must be at least 1"));
  if (s.zero < 0 || s.zero > 3) throw DivisibilityError(cat("ZeRO stage ", s.zero, " is not 0, 1, 2 or 3"));
  if (m.heads % s.tp != 0 || m.hidden % s.tp != 0)
    throw DivisibilityError(cat("tp ", s.tp, " does not divide heads ", m.heads, " and hidden ", m.hidden));
  if (m.layers % s.pp != 0) throw DivisibilityError(cat("pp ", s.pp, " does not divide layers ", m.layers));
  if (s.sequence_parallel && m.seq % s.tp != 0)
    throw DivisibilityError(cat("sequence parallelism: tp ", s.tp, " does not divide the sequence ", m.seq));
}

/// What one rank holds and sends per step.
struct TrainingPerRank {
  double parameters = 0;   // Ψ = N/(t·p)
  ModelStateBytes states;  // ZeRO
  double activations = 0;  // the first stage's, min(p, m) micro-batches of L/p layers
  double tp_bytes = 0, dp_bytes = 0, pp_bytes = 0;

  [[nodiscard]] constexpr double memory() const { return states.total() + activations; }
  [[nodiscard]] constexpr double sent() const { return tp_bytes + dp_bytes + pp_bytes; }
};

constexpr TrainingPerRank training_per_rank(const NamedModel& m, const TrainingSetting& s) {
  TrainingPerRank r;
  r.parameters = m.parameters() / (static_cast<double>(s.tp) * s.pp);
  r.states = zero_model_state_bytes(r.parameters, s.dp, s.zero);
  const TransformerShape x{.batch = s.micro_batch, .seq = m.seq, .hidden = m.hidden, .heads = m.heads, .layers = m.layers};
  const double stage_layers = static_cast<double>(m.layers) / s.pp;
  const double in_flight = static_cast<double>(std::min<std::int64_t>(s.pp, s.micro_batches));
  r.activations = stage_layers * in_flight * activation_bytes_per_layer(x, s.tp, s.sequence_parallel, s.recompute);
  const double passes = s.recompute == Recompute::full ? 3.0 : 2.0;
  r.tp_bytes = static_cast<double>(s.micro_batches) * stage_layers * passes *
               layer_comm(x, s.tp, bf16_bytes, s.sequence_parallel).bytes_per_rank;
  r.dp_bytes = zero_dp_bytes_per_rank(r.parameters, s.dp, s.zero);
  r.pp_bytes = s.pp > 1 ? 2.0 * static_cast<double>(s.micro_batches) * activation_bytes(x, bf16_bytes) / s.tp : 0.0;
  return r;
}

}  // namespace shardalg::cost
