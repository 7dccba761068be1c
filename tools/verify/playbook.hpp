// tools/verify/playbook.hpp — the Ultra-Scale Playbook's memory formulas beside what the run held
// per rank (issue 20; docs/course/16_memory_formulas.md derives every difference term by term).
//
//   parameters per rank   N/t, N = h·v + L(12h² + 13h) + 2h      (held: + the replicated norms and
//                                                                  row-parallel biases, + padded vocabulary rows)
//   activations, L layers L · s·b·h · (34 + 5as/h)  [TP: 10 + 24/t + 5as/(ht); TP+SP: ÷ t]  at 2 bytes a value;
//                         with --recompute, Korthikanti's selective (34, or 10 + 24/t) and full (2, the input)
#pragma once

#include <string>
#include <vector>

#include "options.hpp"
#include "result.hpp"
#include "shardalg/cost/playbook.hpp"
#include "shardalg/cost/training_per_rank.hpp"

namespace sv {

struct PlaybookMemory {
  double parameters_formula = 0;    // N / t
  double parameters_held = 0;       // elements of this rank's parameters (max over ranks)
  double activations_formula = 0;   // bytes, 2 per value
  double activations_held = 0;      // bytes the L blocks' caches held (max over ranks), at element_bytes
  double element_bytes = 8;
  [[nodiscard]] double activation_ratio() const { return activations_formula > 0 ? activations_held / activations_formula : 0; }
};

inline PlaybookMemory playbook_memory(const Options& o, const std::vector<Row>& rows) {
  namespace cost = shardalg::cost;
  PlaybookMemory m;
  m.element_bytes = o.is_double() ? 8.0 : 4.0;
  m.parameters_formula = cost::playbook_parameters_per_rank(o.hidden, o.vocab, o.layers, o.tp);
  const cost::TransformerShape shape{o.batch, o.seq, o.hidden, o.heads, o.ffn_size(), o.layers};
  m.activations_formula = o.recompute == "none" ? cost::playbook_activation_bytes(shape, o.tp, o.sp)
                                                : static_cast<double>(o.layers) *
                                                      cost::activation_bytes_per_layer(shape, o.tp, o.sp, o.recompute_kind());
  for (const auto& row : rows) {
    if (row.key == "gpt") continue;
    m.parameters_held += double(row.mem.params) / m.element_bytes;
    if (row.key.rfind("block", 0) == 0) m.activations_held += double(row.mem.activations);
  }
  return m;
}

}  // namespace sv
