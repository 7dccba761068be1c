// tools/verify/report_json.cpp — the --json report.
#include "report_json.hpp"

#include "playbook.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace sv {

namespace {

using json = nlohmann::json;

json tally_json(const verify::CommTally& t) {
  json j = json::object();
  for (const auto& [k, v] : t.by_kind()) j[k] = {{"count", v.count}, {"bytes", v.bytes}};
  return {{"count", t.count()}, {"bytes", t.bytes()}, {"by_kind", j}};
}

json explain_json(const ExplainResult& ex) {
  auto steps = [&](const std::vector<verify::ExplainStep>& ss) {
    json a = json::array();
    for (const auto& s : ss) {
      json comm = json::array();
      for (const auto& e : s.comm)
        comm.push_back({{"collective", std::string(to_string(e.kind))},
                        {"layout_in", e.layout_in},
                        {"layout_out", e.layout_out},
                        {"elements", e.elements},
                        {"elements_symbolic", ex.dims.sym(e.elements)},
                        {"bytes", e.bytes},
                        {"scope", e.scope}});
      json j{{"op", s.op}, {"note", s.note}, {"comm", std::move(comm)}};
      if (s.plan) {
        j["plan"] = *s.plan;
        j["plan_agrees"] = s.plan_agrees;
      }
      a.push_back(std::move(j));
    }
    return a;
  };
  return {{"block", 0},
          {"sequence_parallel", ex.sequence_parallel},
          {"forward", steps(ex.forward)},
          {"backward", steps(ex.backward)},
          {"check",
           {{"max_abs_difference", ex.max_abs_difference},
            {"bit_identical", ex.bit_identical()},
            {"traced_collectives", ex.traced_collectives},
            {"block_collectives", ex.block_collectives},
            {"collectives_identical", ex.collectives_identical}}}};
}

}  // namespace

std::string format_json(const Options& o, int p, const RankResult& r, bool pass, Index padded) {
  json j;
  j["tool"] = "shardalg-verify";
  j["version"] = kVersion;
  j["config"] = {{"tp", p},
                 {"sp", o.sp},
                 {"layers", o.layers},
                 {"hidden", o.hidden},
                 {"heads", o.heads},
                 {"groups", o.num_groups()},
                 {"ffn", o.ffn_size()},
                 {"seq", o.seq},
                 {"batch", o.batch},
                 {"tokens", o.tokens()},
                 {"vocab", o.vocab},
                 {"vocab_padded", padded},
                 {"dtype", o.dtype},
                 {"seed", o.seed},
                 {"backend", r.backend_name},
                 {"dropout", o.dropout},
                 {"attn_dropout", o.attn_dropout},
                 {"activation", o.act},
                 {"norm", o.norm},
                 {"bias", !o.no_bias},
                 {"dp", r.dp},
                 {"cp", o.cp},
                 {"cp_algo", o.cp_algo},
                 {"recompute", o.recompute},
                 {"zero", o.zero},
                 {"bucket_elements", o.bucket}};
  if (r.dp_figures.zero)
    j["zero"] = {{"moments_bytes_measured", r.dp_figures.state_bytes},
                 {"moments_bytes_formula", r.dp_figures.formula_bytes},
                 {"adam_moments_bytes", r.dp_figures.adam_bytes}};
  if (r.dp_figures.zero && r.dp_figures.stage >= 2)
    j["zero"]["gradients"] = {{"slice_bytes_measured", r.dp_figures.grad_slice_bytes},
                              {"slice_bytes_formula", r.dp_figures.grad_slice_formula},
                              {"peak_bytes_during_backward", r.dp_figures.grad_peak_bytes},
                              {"whole_gradient_bytes", r.dp_figures.grad_whole_bytes}};
  if (r.dp_figures.zero && r.dp_figures.stage == 3)
    j["zero"]["parameters"] = {{"held_bytes_measured", r.dp_figures.param_bytes},
                               {"held_bytes_formula", r.dp_figures.param_formula},
                               {"peak_bytes_during_forward_backward", r.dp_figures.param_peak_bytes},
                               {"peak_bound_bytes", r.dp_figures.param_peak_formula},
                               {"whole_parameter_bytes", r.dp_figures.param_whole_bytes}};
  if (!r.dp_figures.memory.empty()) {
    auto rows = nlohmann::json::array();
    for (const auto& m : r.dp_figures.memory)
      rows.push_back({{"category", m.category}, {"measured_bytes", m.measured}, {"formula_bytes", m.formula},
                      {"formula", m.formula_text}, {"bound", m.bound}});
    j["dp_memory"] = {{"rows", rows},
                      {"forward_backward_seconds", r.dp_figures.fb_seconds},
                      {"forward_backward_seconds_without_recompute", r.dp_figures.fb_seconds_none}};
  }
  if (r.pp_figures.on)
    j["pipeline"] = {{"pp", o.pp},
                     {"schedule", o.schedule},
                     {"microbatches", o.microbatches},
                     {"layout", r.pp_figures.layout},
                     {"deallocate_outputs", o.dealloc},
                     {"overlap_p2p", o.overlap},
                     {"peak_bytes_per_rank", r.pp_figures.peak_bytes}};
  j["tolerance"] = o.tolerance();
  json samples = json::array();
  for (const auto& s : r.cal.samples)
    samples.push_back({{"bytes", s.dense_bytes}, {"seconds", s.seconds}, {"median_seconds", s.median_seconds}});
  j["calibration"] = {{"alpha_seconds", r.cal.link.alpha_seconds},
                      {"beta_bytes_per_second", std::isfinite(r.cal.link.beta_bytes_per_second) ? json(r.cal.link.beta_bytes_per_second) : json(nullptr)},
                      {"group_size", r.cal.group_size},
                      {"samples", samples}};
  json rows = json::array();
  const Totals t = totals(r.rows);
  const PlaybookMemory pm = playbook_memory(o, r.rows);
  for (const auto& row : r.rows) {
    json checks = json::array();
    for (const auto& c : row.checks) {
      checks.push_back({{"name", c.name},
                        {"max_rel", std::isfinite(c.err.max_rel) ? json(c.err.max_rel) : json("inf")},
                        {"max_abs", c.err.max_abs},
                        {"pass", c.pass}});
    }
    if (row.key == "gpt" || row.key == "dp") {
      rows.push_back({{"name", row.name},
                      {"checks", checks},
                      {"max_error", row.max_error()},
                      {"pass", row.pass()},
                      {"comm",
                       {{"forward", {{"ledger", tally_json(row.ledger_fwd)}, {"layer_by_layer", tally_json(row.analytic_fwd)}}},
                        {"backward", {{"ledger", tally_json(row.ledger_bwd)}, {"layer_by_layer", tally_json(row.analytic_bwd)}}},
                        {"match", row.comm_ok()}}}});
      continue;
    }
    rows.push_back({{"name", row.name},
                    {"checks", checks},
                    {"max_error", row.max_error()},
                    {"pass", row.pass()},
                    {"comm",
                     {{"forward", {{"ledger", tally_json(row.ledger_fwd)}, {"analytic", tally_json(row.analytic_fwd)}}},
                      {"backward", {{"ledger", tally_json(row.ledger_bwd)}, {"analytic", tally_json(row.analytic_bwd)}}},
                      {"match", row.comm_ok()}}},
                    {"time",
                     {{"predicted_comm_seconds", row.predicted_s},
                      {"measured_comm_seconds", row.measured_s},
                      {"measured_comm_seconds_max_rank", row.measured_max_s},
                      {"compute_seconds", row.compute_s},
                      {"flops_per_rank", row.flops}}},
                    {"memory_per_rank",
                     {{"parameters_bytes", row.mem.params},
                      {"gradients_bytes", row.mem.grads},
                      {"activations_bytes", row.mem.activations}}}});
  }
  j["layers"] = rows;
  json led = json::array();
  for (const auto& e : r.ledger)
    led.push_back({{"scope", e.scope},
                   {"collective", std::string(to_string(e.kind))},
                   {"layout_in", e.layout_in},
                   {"layout_out", e.layout_out},
                   {"elements", e.elements},
                   {"bytes", e.bytes},
                   {"dtype", std::string(to_string(e.dtype))}});
  j["ledger"] = led;
  j["summary"] = {{"pass", pass},
                  {"checks", t.checks},
                  {"failed", t.failed},
                  {"max_error", t.max_error},
                  {"loss", r.loss},
                  {"loss_reference", r.loss_ref},
                  {"collectives", {{"forward", tally_json(t.fwd)}, {"backward", tally_json(t.bwd)}}},
                  {"predicted_comm_seconds", t.predicted_s},
                  {"measured_comm_seconds", t.measured_s},
                  {"step_seconds", r.step_seconds},
                  {"dense_reference_seconds", r.dense_seconds},
                  {"memory_per_rank",
                   {{"parameters_bytes", t.mem.params},
                    {"gradients_bytes", t.mem.grads},
                    {"activations_bytes", t.mem.activations},
                    {"playbook",
                     {{"parameters_per_rank", pm.parameters_formula},
                      {"parameters_held", pm.parameters_held},
                      {"layer_activation_bytes", pm.activations_formula},
                      {"layer_activation_bytes_held", pm.activations_held}}}}}};
  if (r.explain) j["explain"] = explain_json(*r.explain);
  return j.dump(2);
}

}  // namespace sv
