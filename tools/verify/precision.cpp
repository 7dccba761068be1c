// tools/verify/precision.cpp — `--dtype bf16 | fp16` (and `--dtype float | double --bounds`): each
// sub-layer of each block (LN1, attention, LN2, MLP) run alone in the program's element type E at
// TP p, fed the dense run's input and output gradient rounded to E, against its dense twin
// evaluated over precision::Running: for every output and gradient, error ÷ the bound derived
// from E's rounding (docs/verify.md, "Through a layer: the running bound"). Pass: ≤ 1 everywhere.
//
// A sub-layer at a time, as TTrace does: the bound is worst-case per element and grows with every
// layer it is carried through. Over a whole block in bf16 it is already vacuous (the default
// model: LN2's divisor 0.92 with an error bound of 88); fed the twin's inputs, each sub-layer's
// bound stays at its own size.
//
// With --sp each sub-layer runs as nn::SequenceParallelBlock composes it, through the same calls:
// the activations X[Row] (balanced blocks of the tokens); the norm on the shard, its dγ, dβ
// Partial → all_reduce → R (reduce_norm); attention and MLP entered X[Row] → all_gather → X[R] →
// forward_partial → Z[Partial] → reduce_scatter → Z[Row] → + b, and left backward dZ[Row] →
// all_gather → dZ[R] → backward_partial → dX[Partial] → reduce_scatter → dX[Row]. The twins are
// the same: an all_gather does no arithmetic, a reduce_scatter adds the partials as the
// all_reduce does (in rank order, each add rounded), and `reduced` already charges the norm's dγ,
// dβ as a sum split across P ranks.
#include "precision.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "precision_blocks.hpp"

namespace sv {

std::vector<BoundRow> bound_rows(const Options& o, int p) {
  if (o.dtype == "bf16") return blocks::check_blocks_of<Eigen::bfloat16>(o, p);
  if (o.dtype == "fp16") return blocks::check_blocks_of<Eigen::half>(o, p);
  if (o.dtype == "double") return blocks::double_rows(o, p);
  return blocks::check_blocks_of<float>(o, p);
}

int run_bounds(const Options& o, int p) {
  const std::vector<BoundRow> rows = bound_rows(o, p);
  bool pass = !rows.empty();
  double worst = 0;
  for (const auto& r : rows) {
    pass = pass && r.pass();
    worst = std::max(worst, r.max_ratio);
  }
  const std::string storage = o.dtype == "float" ? "fp32 storage" : o.dtype == "double" ? "fp64 storage"
                                                                                   : fmt::format("{} storage", o.dtype);
  if (o.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& r : rows)
      layers.push_back({{"layer", r.layer}, {"tensor", r.tensor}, {"elements", r.elements}, {"max_error_over_bound", r.max_ratio},
                        {"median_error_over_bound", r.median_ratio}, {"pass", r.pass()}, {"note", r.note}});
    const nlohmann::json j{{"mode", "bounds"},
                           {"config", {{"tp", p}, {"sp", o.sp}, {"dtype", o.dtype}, {"layers", o.layers}, {"hidden", o.hidden},
                                       {"heads", o.heads}, {"seq", o.seq}, {"batch", o.batch}, {"seed", o.seed},
                                       {"dropout", o.dropout}, {"act", o.act}, {"norm", o.norm}}},
                           {"layers", layers},
                           {"summary", {{"pass", pass}, {"max_error_over_bound", worst}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("shardalg-verify: rounding bounds, {} with {} arithmetic, TP {} on threads{}\n", storage,
               o.dtype == "double" ? "fp64" : "fp32", p,
               o.sp ? ", sequence parallel" : "");
    fmt::print("model    {} blocks, hidden {}, {} heads, seq {} × batch {}, {}, {}, dropout {:g}, seed {}\n", o.layers,
               o.hidden, o.heads, o.seq, o.batch, o.act, o.norm, o.dropout, o.seed);
    fmt::print("method   each sub-layer alone, fed the dense run's input and output gradient rounded to {}, against\n"
               "         its dense twin over precision::Running (the bound per element); pass: error ÷ bound ≤ 1\n",
               o.dtype);
    if (o.sp)
      fmt::print("         sequence parallel, as SequenceParallelBlock: X[Row]; attention and MLP entered by all_gather,\n"
                 "         left by reduce_scatter (+ bias after it); the norms' dγ, dβ Partial, then all_reduce\n");
    fmt::print("\n");
    fmt::print("{:<13} {:<8} {:>9} {:>16} {:>9}  {}\n", "layer", "tensor", "elements", "max error÷bound", "median", "");
    for (const auto& r : rows) {
      if (!r.note.empty()) {
        fmt::print("{:<13} {:<8} the bound is vacuous: {}  FAIL\n", r.layer, r.tensor, r.note);
        continue;
      }
      fmt::print("{:<13} {:<8} {:>9} {:>16.3g} {:>9.3g}  {}\n", r.layer, r.tensor, r.elements, r.max_ratio, r.median_ratio,
                 r.pass() ? "ok" : "FAIL");
    }
    fmt::print("\n{}: largest error ÷ bound {:.3g}\n", pass ? "PASS" : "FAIL", worst);
  }
  return pass ? 0 : 1;
}

}  // namespace sv
