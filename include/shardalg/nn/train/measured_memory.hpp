// shardalg/nn/train/measured_memory.hpp — what the library's GPT holds per rank, measured, beside the Ultra-Scale
// Playbook's formulas (cost/playbook.hpp).
//
//   auto r = nn::measure_memory(model, adam, tokens, targets);   // collective: every rank calls
//   r.parameters.measured_bytes, r.parameters.formula_bytes, …, r.activations, r.held.qkv_input, …
//
// The measurement is independent of every formula: it sums rows × cols × element size of the
// matrices actually stored — the parameters' local blocks (visit_params), the gradients' (visit),
// the optimizer's moments (Adam::state) and, between the forward and the backward, every cache the
// backward will read (Gpt::forward_backward's inspect hook) plus the tensors the model's forward
// keeps alive until the backward ends (embedding output, the stream, the head's logits, …).
// `measure_memory` therefore runs one training step: forward_backward, then step(adam).
//
// `expected_activations` is the library's own exact figure, derived by hand from what the layers
// cache (docs/course/16_memory_formulas.md); examples/16 checks measured == expected, term by term:
//
//   per layer and rank, T = b·s tokens, e bytes per element, rows = T (T/t under SP), t = TP:
//     norm_xhat   2 · rows·h·e          LN1 and LN2 keep x̂ (the Playbook: their inputs, 2·2sbh)
//     norm_rstd   2 · rows·e            and 1/σ per token
//     qkv_input   T·h·e                 the QKV GEMM's input X (under SP the gathered X: T, not T/t)
//     qkv         T·(3h/t)·e            Q, K, V of this rank's heads (GQA: its units·(q + 2)·d columns)
//     scores      b·(a/t)·s²·e          softmax probabilities (no attention dropout: no mask, no output)
//     proj_input  T·(h/t)·e             the heads' output O, input of the row-parallel projection
//     fc1_input   T·h·e                 LN2's output (gathered under SP)
//     fc1_output  T·(f/t)·e             GeLU's input H (SwiGLU: 2f/t)
//     fc2_input   T·(f/t)·e             GeLU's output
//   dropout masks: none (recomputed from the seed in backward, nn/layers/dropout.hpp).
//   recomputation (GptConfig::recompute, nn/layers/block.hpp): selective drops `scores`; full keeps
//     block_input rows·h·e          each block's input, and none of the terms above
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardalg/cost/playbook.hpp"
#include "shardalg/nn/layers/cache_bytes.hpp"
#include "shardalg/nn/models/gpt.hpp"

namespace shardalg::nn {

/// A measured figure and the Playbook's for the same thing (bytes per rank).
struct MemoryTerm {
  double measured_bytes = 0;
  double formula_bytes = 0;
  [[nodiscard]] double ratio() const { return formula_bytes > 0 ? measured_bytes / formula_bytes : 0.0; }
};

/// One rank's memory: each field measured, beside the Playbook's formula (16 bytes per parameter
/// split 2 / 2 / 12; activations s·b·h·(34 + 5as/h) per layer in their TP / SP forms).
struct MemoryReport {
  int rank = 0;
  int tp = 1;
  bool sp = false;
  std::size_t element_bytes = 0;  // sizeof(T): 8 double, 4 float
  double parameter_count = 0;     // elements on this rank, measured
  double playbook_parameter_count = 0;           // N of the whole model (unpadded vocabulary)
  double playbook_parameter_count_per_rank = 0;  // N / t
  MemoryTerm parameters;   // formula: N/t × 2 (bf16 weights)
  MemoryTerm gradients;    // formula: N/t × 2 (bf16; 6 with fp32 accumulation: playbook_bytes_per_parameter(true))
  MemoryTerm optimizer;    // formula: N/t × 12 (fp32 master + Adam m + v)
  MemoryTerm activations;  // the L layers' caches; formula: L · s·b·h·(…) (cost::playbook_activation_bytes)
  double activations_expected = 0;  // the library's exact formula for the layers (expected_activations)
  ActivationTerms held;             // measured, by term (layers and outside)
  MemoryTerm total;                 // parameters + gradients + optimizer + activations (layers only)
};


/// The library's exact per-rank activation bytes for `c` at TP `tp`, elements of `element_bytes`
/// (the formula at the top of this header; LayerNorm or RMSNorm, GeLU or SwiGLU, MHA or GQA).
inline ActivationTerms expected_activations(const GptConfig& c, int tp, std::size_t element_bytes) {
  const double e = static_cast<double>(element_bytes), t = tp, L = static_cast<double>(c.layers);
  const double T = static_cast<double>(c.tokens()), h = static_cast<double>(c.hidden);
  const double rows = c.sp ? T / t : T;
  const QkvLayout lay{c.heads, c.groups == 0 ? c.heads : c.groups, c.hidden / c.heads, tp};
  const double ffn_out = static_cast<double>(c.activation == Activation::swiglu ? 2 * c.ffn_size() : c.ffn_size());
  const double v = static_cast<double>(padded_vocab(c.vocab, c.vocab_divisor, tp));
  ActivationTerms a;
  a.norm_xhat = L * 2 * rows * h * e;
  a.norm_rstd = L * 2 * rows * e;
  a.qkv_input = L * T * h * e;
  a.qkv = L * T * static_cast<double>(lay.rank_width()) * e;
  a.scores = L * static_cast<double>(c.batch) * (static_cast<double>(c.heads) / t) * static_cast<double>(c.seq) *
             static_cast<double>(c.seq) * e;
  a.proj_input = L * T * (h / t) * e;  // heads·d = h
  a.fc1_input = L * T * h * e;
  a.fc1_output = L * T * (ffn_out / t) * e;
  a.fc2_input = L * T * (static_cast<double>(c.ffn_size()) / t) * e;
  if (c.recompute == Recompute::selective) a.scores = 0;  // P recomputed in the backward
  if (c.recompute == Recompute::full) {                   // each block keeps its input X[L] alone
    a = ActivationTerms{};
    a.block_input = L * rows * h * e;
  }
  a.embedding_ids = T * 8;
  a.embedding_output = rows * h * e;
  a.stream = rows * h * e;
  a.final_norm_output = rows * h * e;
  a.final_norm_cache = rows * (h + 1) * e;
  a.head_input = T * h * e;
  a.logits = T * (v / t) * e;
  a.loss_probs = T * (v / t) * e;
  a.loss_tokens = T * (e + 8 + 1);
  return a;
}

/// The library's exact parameter count per rank for a GeLU/LayerNorm/bias MHA config: the word
/// embedding (padded vocabulary) and every column-parallel weight and bias divided by t; the
/// row-parallel biases (bo, b2: 2h per layer), the layer norms (4h per layer) and the final norm
/// (2h) replicated: v_p·h/t + L·(12h²/t + 7h/t + 6h) + 2h.
inline double expected_parameters_per_rank(const GptConfig& c, int tp) {
  const double h = static_cast<double>(c.hidden), L = static_cast<double>(c.layers), t = tp;
  const double v = static_cast<double>(padded_vocab(c.vocab, c.vocab_divisor, tp));
  return v * h / t + L * (12 * h * h / t + 7 * h / t + 6 * h) + 2 * h;
}

/// Collective (every rank of the model's group calls it with the same batch). Runs one training
/// step — forward_backward on (tokens, targets), then model.step(opt, max_grad_norm) — and
/// measures on the way: the activations held between the forward and the backward, the
/// gradients before the step, the parameters, and the optimizer's state after it.
template <Element T, class B>
MemoryReport measure_memory(Gpt<T, B>& model, Adam<T, B>& opt, std::span<const std::int64_t> tokens,
                            std::span<const std::int64_t> targets, double max_grad_norm = 0.0) {
  using detail::local_bytes;
  using detail::matrix_bytes;
  using detail::vector_bytes;
  const GptConfig& c = model.config();
  const int tp = model.group().size();
  MemoryReport r;
  r.rank = model.group().rank();
  r.tp = tp;
  r.sp = c.sp;
  r.element_bytes = sizeof(T);

  model.forward_backward(tokens, targets, [&](const auto& emb, const auto& stream, const auto& caches,
                                              const auto& fnorm, const auto& head, const auto& loss) {
    ActivationTerms& a = r.held;
    for (const auto& cache : caches) detail::add_block_cache(a, cache);
    a.embedding_ids = vector_bytes(emb.cache.ids);
    a.embedding_output = local_bytes(emb.y);
    a.stream = local_bytes(stream);
    a.final_norm_output = local_bytes(fnorm.y);
    a.final_norm_cache = local_bytes(fnorm.cache.xhat) + matrix_bytes(fnorm.cache.rstd);
    a.head_input = local_bytes(head.cache.x);
    a.logits = local_bytes(head.logits);
    a.loss_probs = local_bytes(loss.cache.probs);
    a.loss_tokens = local_bytes(loss.losses) + vector_bytes(loss.cache.targets) + vector_bytes(loss.cache.active);
  });
  model.visit([&](const ParamInfo&, const auto&, const auto& g) { r.gradients.measured_bytes += local_bytes(g); });
  model.visit_params([&](const ParamInfo&, const TensorMap&, const auto& w) {
    r.parameters.measured_bytes += local_bytes(w);
    r.parameter_count += static_cast<double>(w.local().rows()) * static_cast<double>(w.local().cols());
  });
  model.step(opt, max_grad_norm);
  for (const auto& [name, m] : opt.state())
    r.optimizer.measured_bytes += matrix_bytes(m.m) + matrix_bytes(m.v) + matrix_bytes(m.master);

  r.playbook_parameter_count = cost::playbook_parameters(c.hidden, c.vocab, c.layers);
  r.playbook_parameter_count_per_rank = r.playbook_parameter_count / tp;
  const auto bpp = cost::playbook_bytes_per_parameter();
  r.parameters.formula_bytes = r.playbook_parameter_count_per_rank * bpp.weight;
  r.gradients.formula_bytes = r.playbook_parameter_count_per_rank * bpp.gradients();
  r.optimizer.formula_bytes = r.playbook_parameter_count_per_rank * bpp.optimizer();
  const cost::TransformerShape x{.batch = c.batch, .seq = c.seq, .hidden = c.hidden, .heads = c.heads,
                                 .ffn_hidden = c.ffn_size(), .layers = c.layers};
  r.activations.measured_bytes = r.held.layers();
  r.activations.formula_bytes = cost::playbook_activation_bytes(x, tp, c.sp);
  r.activations_expected = expected_activations(c, tp, sizeof(T)).layers();
  r.total.measured_bytes = r.parameters.measured_bytes + r.gradients.measured_bytes + r.optimizer.measured_bytes +
                           r.activations.measured_bytes;
  r.total.formula_bytes = r.parameters.formula_bytes + r.gradients.formula_bytes + r.optimizer.formula_bytes +
                          r.activations.formula_bytes;
  return r;
}

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/gpt.cpp and src/gpt_double.cpp (shardalg::compiled)
extern template MemoryReport measure_memory(Gpt<float, CpuBackend>&, Adam<float, CpuBackend>&,
                                            std::span<const std::int64_t>, std::span<const std::int64_t>, double);
extern template MemoryReport measure_memory(Gpt<double, CpuBackend>&, Adam<double, CpuBackend>&,
                                            std::span<const std::int64_t>, std::span<const std::int64_t>, double);
#endif

}  // namespace shardalg::nn
