// tools/verify/result.hpp — what one run found, as rank 0 assembles it: a row per layer (its
// checks against the dense reference, its collectives beside the analytic ones, its time and
// memory) and the run's totals. The reports (report_text, report_json) print it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "explain_block.hpp"
#include "model.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/verify/check.hpp"
#include "shardalg/observe/held_bytes.hpp"
#include "shardalg/observe/tally.hpp"

namespace sv {

/// One layer of the report: its checks (verify::LayerCheck: name, checks, max error), its
/// collectives beside the analytic ones, its time and memory.
struct Row : verify::LayerCheck {
  std::string key;                  // scope label: "embed", "block0", …
  std::vector<std::string> scopes;  // ledger scopes (under fwd/ and bwd/) that belong to the row
  verify::CommTally ledger_fwd, ledger_bwd, analytic_fwd, analytic_bwd;
  double predicted_s = 0, measured_s = 0, measured_max_s = 0, compute_s = 0;
  double flops = 0;     // forward + backward, per rank (cost model), blocks only
  verify::Memory mem;   // max over ranks

  Row() = default;
  Row(std::string name, std::string k, std::vector<std::string> sc, double tol)
      : verify::LayerCheck(std::move(name), tol), key(std::move(k)), scopes(std::move(sc)) {}

  [[nodiscard]] bool comm_ok() const { return ledger_fwd == analytic_fwd && ledger_bwd == analytic_bwd; }
  [[nodiscard]] bool pass() const { return comm_ok() && all_pass(); }
};

/// --dp --zero: the sharded optimizer's moments on one rank, measured and by the formula, and
/// what unsharded Adam would hold (2Ψ values); with --zero 2 the gradient bytes held; with --zero 3
/// the parameter bytes held between steps (measured, by the formula), the whole replica's e·Ψ and
/// the most held during forward_backward.
struct DpFigures {
  /// One row of the memory table: this rank's bytes of one category, measured from the tensors held,
  /// beside a formula (0: none) written out in `formula_text`.
  struct Memory {
    std::string category, formula_text;
    double measured = 0, formula = 0;
    bool bound = false;  // the formula is an upper bound, not an equality
  };
  std::vector<Memory> memory;   // every --dp run
  double fb_seconds = 0;        // median forward_backward time (rank 0), at --recompute
  double fb_seconds_none = 0;   // the same model without recomputation (0: --recompute none)
  bool zero = false;
  std::size_t state_bytes = 0, formula_bytes = 0, adam_bytes = 0;
  int stage = 1;
  std::size_t grad_peak_bytes = 0, grad_slice_bytes = 0, grad_slice_formula = 0, grad_whole_bytes = 0, grad_bound = 0;
  std::size_t param_bytes = 0, param_formula = 0, param_whole_bytes = 0, param_peak_bytes = 0, param_peak_formula = 0;
};

/// --pp: the layout the stages held, the peak bytes each rank held between ops (measured by the
/// executor), and rank 0's seconds waiting for messages and computing.
struct PpFigures {
  bool on = false;
  std::string layout;
  std::vector<std::size_t> peak_bytes;  // per world rank
  double wait_s = 0, compute_s = 0;
};

/// The --dp row's name (fits the report's first column): "DP=2 Gpt", "DP=2 Gpt ZeRO".
inline std::string fmt_dp_name(int d, int /*t*/, int zero) {
  return "DP=" + std::to_string(d) + " Gpt" + (zero == 1 ? " ZeRO" : zero >= 2 ? " ZeRO-" + std::to_string(zero) : "");
}

struct RankResult {  // filled on rank 0
  std::vector<Row> rows;
  std::vector<LedgerEntry> ledger;
  cost::Calibration cal;
  std::optional<ExplainResult> explain;
  std::vector<std::string> trace_events;  // every rank's trace events, one JSON array text per rank
  double loss = 0, loss_ref = 0;
  double step_seconds = 0, dense_seconds = 0;
  std::string backend_name;
  int dp = 1;
  DpFigures dp_figures;
  PpFigures pp_figures;  // --pp (tools/verify/pipeline.hpp)
  DenseRun dense;  // the dense reference pass (rank 0), which the --dp row compares with too
};

/// The totals over the layer rows (the nn::Gpt row, key "gpt", and the data-parallel row, key
/// "dp", are further runs: not summed).
struct Totals {
  std::size_t checks = 0, failed = 0;
  double max_error = 0, predicted_s = 0, measured_s = 0, measured_max_s = 0, compute_s = 0;
  verify::Memory mem;
  verify::CommTally fwd, bwd;
};
inline Totals totals(const std::vector<Row>& rows) {
  Totals t;
  for (const auto& row : rows) {
    t.checks += row.checks.size();
    t.failed += row.failures();
    t.max_error = std::max(t.max_error, row.max_error());
    if (row.key == "gpt" || row.key == "dp" || row.key == "pp") continue;
    t.predicted_s += row.predicted_s;
    t.measured_s += row.measured_s;
    t.measured_max_s += row.measured_max_s;
    t.compute_s += row.compute_s;
    t.mem += row.mem;
    t.fwd += row.ledger_fwd;
    t.bwd += row.ledger_bwd;
  }
  return t;
}

}  // namespace sv
