// tools/verify/report_text.cpp — the text report. Columns are aligned by fmt's width specs, which
// count UTF-8 code points (the tables hold µ, ×, →, ᵀ …).
#include "report_text.hpp"

#include "playbook.hpp"

#include <cmath>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

namespace sv {

namespace {

using Out = std::back_insert_iterator<std::string>;

std::string abbreviation(const std::string& kind) {
  return kind == "all_reduce" ? "AR" : kind == "all_gather" ? "AG" : kind == "reduce_scatter" ? "RS" : kind == "all_to_all" ? "A2A" : kind;
}

void explain_text(Out out, const ExplainResult& ex, int p) {
  fmt::format_to(out, "\nexplain: block 0 as executed (rank 0 of {}; T = tokens, h = hidden)\n", p);
  for (const auto* phase : {&ex.forward, &ex.backward}) {
    fmt::format_to(out, "  {}\n", phase == &ex.forward ? "forward" : "backward");
    for (const auto& s : *phase) {
      std::string comm;
      if (s.comm.empty()) comm = "(no comm)";
      for (const auto& c : s.comm)
        comm += fmt::format("{}(1 {} {}→{} of {} = {} el, {})", comm.empty() ? "" : "; ", to_string(c.kind), c.layout_in,
                            c.layout_out, ex.dims.sym(c.elements), c.elements, format_bytes(static_cast<double>(c.bytes)));
      fmt::format_to(out, "    {:<58} {}{}\n", s.op, comm, s.note.empty() ? "" : "  — " + s.note);
      if (s.plan) fmt::format_to(out, "      {}  — {}\n", *s.plan, s.plan_agrees ? "the same collectives" : "DIFFERENT collectives");
    }
  }
  fmt::format_to(out,
                 "  trace check: re-executed results vs {}::forward/backward: {}; collectives {} traced vs {} in the "
                 "block's ledger: {}\n",
                 ex.sequence_parallel ? "SequenceParallelBlock" : "TransformerBlock",
                 ex.bit_identical() ? "bit-identical" : "max |Δ| = " + format_err(ex.max_abs_difference), ex.traced_collectives,
                 ex.block_collectives, ex.collectives_identical ? "identical" : "DIFFERENT");
}

}  // namespace

std::string format_bytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
}

std::string format_time(double s) {
  if (s == 0) return "0";
  if (s < 1e-3) return fmt::format("{:.1f} µs", s * 1e6);
  if (s < 1.0) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string format_err(double e) { return fmt::format("{:.1e}", e); }

/// "M = formula F V (equal)": a measured byte count beside its formula's value (DIFFERENT otherwise).
template <class N>
std::string beside_formula(N measured, std::string_view formula, N value) {
  return fmt::format("{} = formula {} {} ({})", format_bytes(double(measured)), formula, format_bytes(double(value)),
                     measured == value ? "equal" : "DIFFERENT");
}

std::string tally_text(const verify::CommTally& t) {
  if (t.empty()) return "0";
  std::string s;
  for (const auto& [k, v] : t.by_kind()) s += fmt::format("{}{} {}", s.empty() ? "" : "+", v.count, abbreviation(k));
  return s + " " + format_bytes(static_cast<double>(t.bytes()));
}

std::string format_text(const Options& o, int p, const RankResult& r, bool pass, Index padded) {
  std::string text;
  auto out = std::back_inserter(text);
  const Index d = o.hidden / o.heads;
  fmt::format_to(out, "shardalg-verify {} — one forward + backward pass, sharded vs dense (reference/dense_layers.hpp)\n", kVersion);
  fmt::format_to(out, "model    GPT: {} layers, hidden {}, {} heads of {} ({} query groups), ffn {}, {}×{} = {} tokens,\n",
                 o.layers, o.hidden, o.heads, d, o.num_groups(), o.ffn_size(), o.batch, o.seq, o.tokens());
  fmt::format_to(out, "         vocab {} (padded {}), {}, {}, dropout {:g}{}, {}\n", o.vocab, padded, o.norm, o.act, o.dropout,
                 o.attn_dropout > 0 ? fmt::format(", attention dropout {:g}", o.attn_dropout) : "", o.dtype);
  fmt::format_to(out, "sharded  TP={}{}{}{} on {}, {}\n", p, r.dp > 1 ? fmt::format(" × DP={}", r.dp) : "",
                 o.pp > 1 ? fmt::format(" × PP={}", o.pp) : "", o.cp > 1 ? fmt::format(" × CP={} ({})", o.cp, o.cp_algo) : "", r.backend_name,
                 fmt::format("{}{}", o.sp ? "sequence parallel" : "no sequence parallelism",
                             o.recompute != "none" ? fmt::format(", {} recomputation", o.recompute) : std::string()));
  const double beta = r.cal.link.beta_bytes_per_second;
  fmt::format_to(out, "link     α = {}, β = {}  (fitted on this group: all-reduce of 4 KiB … 1 MiB, fastest of 9)\n",
                 format_time(r.cal.link.alpha_seconds), std::isfinite(beta) ? fmt::format("{:.3g} GB/s", beta / 1e9) : "∞");
  fmt::format_to(out, "pass     normwise relative error ≤ {} ({}) for every output and gradient; ledger = analytic collectives, exactly\n\n",
                 format_err(o.tolerance()), o.dtype);

  // 1. errors
  fmt::format_to(out, "{:<17}{:>6}  {:<15}worst\n", "layer", "checks", "max rel error");
  for (const auto& row : r.rows) {
    const verify::Check* worst = row.worst();
    const std::size_t fails = row.failures();
    fmt::format_to(out, "{:<17}{:>6}  {:<15}{}{}\n", row.name, row.checks.size(), worst ? format_err(worst->err.max_rel) : "-",
                   worst ? worst->name : "", fails ? fmt::format("   FAIL ×{}", fails) : "");
    if (o.verbose)
      for (const auto& c : row.checks)
        fmt::format_to(out, "    {:<46}{}  (abs {}){}\n", c.name, format_err(c.err.max_rel), format_err(c.err.max_abs),
                       c.pass ? "" : "  FAIL");
  }

  // 2. collectives
  fmt::format_to(out, "\n{:<17}{:<26}{:<26}{:<26}{:<26}\n", "collectives", "forward: ledger", "analytic", "backward: ledger", "analytic");
  for (const auto& row : r.rows)
    fmt::format_to(out, "{:<17}{:<26}{:<26}{:<26}{:<26}{}\n", row.name, tally_text(row.ledger_fwd), tally_text(row.analytic_fwd),
                   tally_text(row.ledger_bwd), tally_text(row.analytic_bwd), row.comm_ok() ? "=" : "MISMATCH");
  fmt::format_to(out,
                 "  (AR all_reduce, AG all_gather, RS reduce_scatter; bytes: the dense V of each, as the ledger counts;\n"
                 "   nn::Gpt's analytic column is the layer-by-layer run's ledger: the model class must communicate the same)\n");
  if (r.pp_figures.on)
    fmt::format_to(out,
                   "  (PP: pp rank 0's point-to-point sends and receives during the schedule, beside the count from the\n"
                   "   schedule: one per message, this tp rank's block of the micro-batch's activation or gradient)\n");
  if (r.dp > 1)
    fmt::format_to(out,
                   "  (DataParallelGpt: its collectives on the dp axis only — forward: the global loss; backward: the\n"
                   "   gradient buckets' all_reduce, or ZeRO-1's reduce_scatter + all_gather and the norm — beside the\n"
                   "   count from the configuration: Ψ local values per tensor-parallel rank, packed greedily into buckets;\n"
                   "   forward_backward takes ZeRO-2's reduce_scatters and ZeRO-3's parameter all_gathers too)\n");

  // 3. time and memory (the layer-by-layer run; nn::Gpt is a second run of the same model)
  constexpr auto kTimeRow = "{:<17}{:>14}{:>11}{:>12}{:>11}{:>12}{:>12}{:>13}\n";
  fmt::format_to(out, fmt::runtime(std::string("\n") + kTimeRow), "per rank", "comm predicted", "measured", "(max rank)", "compute",
                 "params", "grads", "activations");
  auto time_row = [&](const std::string& name, double pred, double meas, double measmax, double comp, const verify::Memory& m) {
    fmt::format_to(out, kTimeRow, name, format_time(pred), format_time(meas), format_time(measmax), format_time(comp),
                   format_bytes(double(m.params)), format_bytes(double(m.grads)), format_bytes(double(m.activations)));
  };
  for (const auto& row : r.rows)
    if (row.key != "gpt" && row.key != "dp" && row.key != "pp") time_row(row.name, row.predicted_s, row.measured_s, row.measured_max_s, row.compute_s, row.mem);
  const Totals t = totals(r.rows);
  time_row("total", t.predicted_s, t.measured_s, t.measured_max_s, t.compute_s, t.mem);
  fmt::format_to(out,
                 "  predicted: α-β ring model of each ledgered collective; measured: per collective the fastest rank's time\n"
                 "  (the last to arrive, no waiting), summed; (max rank): the slowest rank's, waiting included;\n"
                 "  compute: the slowest rank's layer time minus its collectives; memory: bytes of this rank's tensors\n");

  if (r.explain) explain_text(out, *r.explain, p);
  if (r.dp_figures.zero) {
    const auto& f = r.dp_figures;
    fmt::format_to(out, "\nZeRO-1   optimizer moments per rank: measured {}; unsharded Adam would hold {} (×{:.2f})\n",
                   beside_formula(f.state_bytes, "2·e·Σ_b⌈n_b/dp⌉", f.formula_bytes), format_bytes(double(f.adam_bytes)),
                   f.state_bytes ? double(f.adam_bytes) / double(f.state_bytes) : 0.0);
    if (f.stage >= 2)
      fmt::format_to(out,
                     "ZeRO-2   gradients per rank: slices after the backward {}; at most {} held during the backward; the "
                     "whole gradient would be {}\n",
                     beside_formula(f.grad_slice_bytes, "e·Σ_b⌈n_b/dp⌉", f.grad_slice_formula),
                     format_bytes(double(f.grad_peak_bytes)), format_bytes(double(f.grad_whole_bytes)));
    if (f.stage == 3)
      fmt::format_to(out,
                     "ZeRO-3   parameters per rank: held between steps {}; at most {} held during forward_backward "
                     "(bound: slices + embedding + final norm + two blocks + one bucket = {}); the whole replica would be "
                     "e·Ψ = {}\n",
                     beside_formula(f.param_bytes, "e·Σ_b⌈n_b/dp⌉", f.param_formula),
                     format_bytes(double(f.param_peak_bytes)), format_bytes(double(f.param_peak_formula)),
                     format_bytes(double(f.param_whole_bytes)));
  }

  if (!r.dp_figures.memory.empty()) {
    const auto& f = r.dp_figures;
    fmt::format_to(out, "\nmemory per rank (rank 0's replica: dp {} × tp {}, ZeRO-{}, recompute {}), measured from the tensors held\n",
                   r.dp, p, o.zero, o.recompute);
    constexpr auto kMemRow = "  {:<38}{:>12}{:>12}{:>8}  {}\n";
    fmt::format_to(out, kMemRow, "category", "measured", "formula", "ratio", "formula's terms");
    for (const auto& m : f.memory)
      fmt::format_to(out, kMemRow, m.category, format_bytes(m.measured), m.formula > 0 ? format_bytes(m.formula) : "none",
                     m.formula > 0 ? fmt::format("{:.3f}", m.measured / m.formula) : "none",
                     m.bound ? "at most " + m.formula_text : m.formula_text);
    fmt::format_to(out, "forward_backward: {} (median of 3){}\n", format_time(f.fb_seconds),
                   f.fb_seconds_none > 0 ? fmt::format("; the same model without recomputation {}: recompute {} costs ×{:.2f}",
                                                       format_time(f.fb_seconds_none), o.recompute, f.fb_seconds / f.fb_seconds_none)
                                         : std::string());
  }

  if (r.pp_figures.on) {
    std::string peaks;
    for (std::size_t k = 0; k < r.pp_figures.peak_bytes.size(); ++k)
      peaks += fmt::format("{}{}", k ? ", " : "", format_bytes(double(r.pp_figures.peak_bytes[k])));
    fmt::format_to(out,
                   "\npipeline layout \"{}\", {} micro-batches per replica{}{}; bytes held between ops, peak per rank: {}; "
                   "rank 0 waited {} for messages, computed {}\n",
                   r.pp_figures.layout, o.microbatches, o.dealloc ? ", outputs deallocated" : "",
                   o.overlap ? ", receives overlapped" : "", peaks, format_time(r.pp_figures.wait_s),
                   format_time(r.pp_figures.compute_s));
  }

  fmt::format_to(out, "\nsummary  {}/{} checks passed, max error {} (threshold {}); loss {:.10g} (dense {:.10g})\n",
                 t.checks - t.failed, t.checks, format_err(t.max_error), format_err(o.tolerance()), r.loss, r.loss_ref);
  fmt::format_to(out, "         collectives per step: forward {} ({}), backward {} ({})\n", t.fwd.count(), tally_text(t.fwd),
                 t.bwd.count(), tally_text(t.bwd));
  fmt::format_to(out, "         comm time: predicted {}, measured {} (×{:.2g}); step {}, dense reference {}\n",
                 format_time(t.predicted_s), format_time(t.measured_s), t.predicted_s > 0 ? t.measured_s / t.predicted_s : 0.0,
                 format_time(r.step_seconds), format_time(r.dense_seconds));
  fmt::format_to(out, "         memory per rank: parameters {}, gradients {}, activations held {}\n", format_bytes(double(t.mem.params)),
                 format_bytes(double(t.mem.grads)), format_bytes(double(t.mem.activations)));
  const PlaybookMemory pm = playbook_memory(o, r.rows);
  fmt::format_to(out,
                 "         Playbook formula per rank: parameters N/t {:.0f} (held {:.0f}); activations of {} layers {} at 2 B a "
                 "value (held {} at {:.0f} B, ×{:.2f}; docs/course/16_memory_formulas.md names each term)\n",
                 pm.parameters_formula, pm.parameters_held, o.layers, format_bytes(pm.activations_formula),
                 format_bytes(pm.activations_held), pm.element_bytes, pm.activation_ratio());
  fmt::format_to(out, "{}\n", pass ? "PASS" : "FAIL");
  return text;
}

}  // namespace sv
