// tools/verify/pipeline.hpp — `--pp N --schedule NAME`: the GPT cut into pipeline stages on a
// dp × pp × tp mesh (× cp with --cp: each stage's activations X[cp:Row], attention over cp) (nn::PipelineGpt run by pipeline::Executor), one step on the global batch
// against the dense reference of the whole batch: the loss and every gradient; its point-to-point
// traffic on the pp axis beside the count from the schedule; the peak bytes each stage held
// between ops; with --trace, the schedule as executed, one row per rank (Chrome trace).
//
//   layout        "E" + the layers spread over S = pp·v stages (the first stages one more when S
//                 does not divide them) + "L" (pipeline/stage_assignment.hpp)
//   micro-batches --microbatches per replica (default: one sequence each), of batch/(dp·m) sequences
//   loss          per-token scaling (the whole batch's mean, nn/models/pipeline_parts.hpp)
//   analytic p2p  rank 0 of the world (pp rank 0): one send per F of a stage that is not the last
//                 and per backward of a stage that is not the first, one receive per F of a stage
//                 that is not the first and per backward of a stage that is not the last, each
//                 (batch/(dp·m))·seq·h elements (÷ tp under SP, ÷ cp); no shape messages (the tool's
//                 batch has one sequence length)
#pragma once

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "model.hpp"
#include "options.hpp"
#include "result.hpp"
#include "shardalg/mesh/mesh.hpp"
#include "shardalg/nn/models/pipeline_gpt.hpp"
#include "shardalg/pipeline/executor.hpp"
#include "shardalg/verify/gather.hpp"
#include "shardalg/verify/verify.hpp"

#include <fmt/format.h>

namespace sv {

namespace pl = shardalg::pipeline;

inline pl::Schedule pp_schedule(const Options& o) {
  const int m = o.microbatches;
  if (o.schedule == "afab") return pl::afab(o.pp, m);
  if (o.schedule == "interleaved") return pl::interleaved_1f1b(o.pp, m, 2);
  if (o.schedule == "zb-h1") return pl::zb_h1(o.pp, m);
  return pl::one_f_one_b(o.pp, m);
}

/// "E" + layers over S stages + "L": stage i holds ⌊L/S⌋ layers, one more for i < L mod S.
inline std::string pp_layout(int layers, int stages) {
  std::string s = "E";
  for (int i = 0; i < stages; ++i) {
    s += std::string(static_cast<std::size_t>(layers / stages + (i < layers % stages ? 1 : 0)), 't');
    s += i + 1 < stages ? "|" : "L";
  }
  return s;
}

/// The schedule as executed, as Chrome-trace events of world rank `rank` (one row per rank;
/// 1 µs = 1 µs): "F3", "B3", "W3", "BW3" with the chunk and stage as arguments.
inline std::string pp_trace_json(int rank, const pl::RunStats& st) {
  std::string out = "[";
  out += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank) + ", \"tid\": " +
         std::to_string(rank) + ", \"args\": {\"name\": \"rank " + std::to_string(rank) + "\"}}";
  for (const auto& r : st.ops) {
    const std::string name = std::string(pl::kind_name(r.op.kind)) + std::to_string(r.op.microbatch);
    out += ", {\"name\": \"" + name + "\", \"cat\": \"pipeline\", \"ph\": \"X\", \"pid\": " + std::to_string(rank) +
           ", \"tid\": " + std::to_string(rank) + ", \"ts\": " + std::to_string(r.ready * 1e6) +
           ", \"dur\": " + std::to_string(r.compute() * 1e6) + ", \"args\": {\"chunk\": " + std::to_string(r.op.chunk) +
           ", \"stage\": " + std::to_string(r.stage) + ", \"wait_us\": " + std::to_string(r.wait() * 1e6) + "}}";
  }
  return out + "]";
}

/// Every rank of the mesh calls it; rank 0 of the world gets the row, the figures and the trace.
template <class T, bool SP>
void run_pp(const Mesh& raw_mesh, const Options& o, const DenseModel& dm, const DenseRun* dense, Row* out,
            PpFigures* figures, std::vector<std::string>* trace) {
  const int D = raw_mesh.size("dp"), P = raw_mesh.size("tp"), PP = raw_mesh.size("pp"), C = raw_mesh.has("cp") ? raw_mesh.size("cp") : 1;
  const double tol = o.tolerance();
  Ledger ledger;
  const Mesh mesh(ledgered(raw_mesh.world(), ledger), raw_mesh.axes());
  nn::GptConfig gc = gpt_config(o, SP);
  const auto sched = pp_schedule(o);
  const std::string lay = pp_layout(o.layers, PP * sched.v);
  const nn::Masters masters = to_masters(o, dm.g);  // the dense model, by the logical names (as --dp)
  auto model = nn::PipelineGpt<T, SP>::init(gc, pl::parse_layout(lay, PP, o.layers), mesh, &masters,
                                            o.cp_algo == "a2a" ? nn::CpAlgo::all_to_all : nn::CpAlgo::ring);
  const int d = mesh.coord("dp");
  const Index per = o.batch / D * o.seq;  // this replica's tokens
  const std::vector<std::int64_t> x(dm.ids.begin() + d * per, dm.ids.begin() + (d + 1) * per);
  const std::vector<std::int64_t> y(dm.targets.begin() + d * per, dm.targets.begin() + (d + 1) * per);
  model.set_microbatches(nn::split_microbatches(x, y, o.seq, o.microbatches, d * per), nn::LossScaling::tokens,
                         static_cast<Index>(dm.targets.size()));
  pl::ExecOptions eo;
  eo.deallocate_outputs = o.dealloc;
  eo.overlap_p2p = o.overlap;
  pl::Executor<nn::PipelineGpt<T, SP>> ex(mesh.group("pp"), sched, eo);
  pl::RunStats st;
  {
    auto s = ledger.scope("pp");
    st = ex.run(model);
  }
  const std::size_t after_run = ledger.entries().size();
  const T loss = model.finish();
  const auto grads = model.grad_masters();
  // Every rank's gradients and figures to rank 0 (verification traffic, not in the ledger).
  std::vector<double> mine(2, 0.0);
  mine[0] = static_cast<double>(st.peak_bytes);
  const auto peaks = verify::gather_doubles(raw_mesh.world(), mine);
  std::string packed;  // "name\trows\tcols\tv v v …\n" per tensor this rank reports (tp rank 0, dp 0, cp 0)
  if (mesh.coord("tp") == 0 && d == 0 && (C == 1 || mesh.coord("cp") == 0))
    for (const auto& [name, m] : grads) {
      packed += name + "\t" + std::to_string(m.rows()) + "\t" + std::to_string(m.cols()) + "\t";
      for (Index j = 0; j < m.cols(); ++j)
        for (Index i = 0; i < m.rows(); ++i) packed += fmt::format("{:a} ", m(i, j));
      packed += "\n";
    }
  const auto all = verify::gather_strings(raw_mesh.world(), packed);
  std::vector<std::string> events;
  if (!o.trace.empty()) events = verify::gather_strings(raw_mesh.world(), pp_trace_json(raw_mesh.world().rank(), st));
  if (raw_mesh.world().rank() != 0) return;

  nn::Masters got;
  for (const auto& text : all) {
    std::size_t at = 0;
    while (at < text.size()) {
      const auto nl = text.find('\n', at);
      const std::string line = text.substr(at, nl - at);
      at = nl + 1;
      const auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1), t3 = line.find('\t', t2 + 1);
      const Index r = std::stol(line.substr(t1 + 1, t2 - t1 - 1)), c = std::stol(line.substr(t2 + 1, t3 - t2 - 1));
      M m(r, c);
      const char* p = line.c_str() + t3 + 1;
      for (Index j = 0; j < c; ++j)
        for (Index i = 0; i < r; ++i) {
          char* end = nullptr;
          m(i, j) = std::strtod(p, &end);
          p = end;
        }
      got[line.substr(0, t1)] = std::move(m);
    }
  }

  const std::string label = o.schedule == "afab" ? "AFAB" : o.schedule == "zb-h1" ? "ZB-H1" : o.schedule == "interleaved" ? "int. 1F1B" : "1F1B";
  Row row("PP=" + std::to_string(PP) + " " + label, "pp", {}, tol);  // (cp: in the report's header)
  // Point to point on the pp axis during the run, rank 0's, beside the count from the schedule.
  for (std::size_t i = 0; i < after_run; ++i) {
    const auto& e = ledger.entries()[i];
    if (e.axis == "pp" && (e.kind == CollectiveKind::send || e.kind == CollectiveKind::recv)) row.ledger_fwd.add(e);
  }
  const std::size_t block = static_cast<std::size_t>(per / o.microbatches / C * o.hidden / (SP ? P : 1)) * sizeof(T);
  const int S = sched.stages();
  for (const auto& op : sched.ranks[0]) {
    const int s = sched.stage(0, op.chunk);
    const bool fwd = op.kind == pl::OpKind::F, bwd = op.kind == pl::OpKind::B || op.kind == pl::OpKind::BW;
    if ((fwd && s < S - 1) || (bwd && s > 0)) row.analytic_fwd.add(CollectiveKind::send, block);
    if ((fwd && s > 0) || (bwd && s < S - 1)) row.analytic_fwd.add(CollectiveKind::recv, block);
  }
  row.checks.push_back(verify::check_scalar("mean loss (global batch)", static_cast<double>(loss), dense->out.mean, tol));
  const auto expect = fuse_parts(grad_masters(o, dense->grads));
  const auto have = fuse_parts(got);
  double model_scale = 0;
  for (const auto& [name, m] : expect) model_scale = std::max(model_scale, m.cwiseAbs().maxCoeff());
  for (const auto& [name, m] : expect) {
    verify::Check ck{"d " + name, {}, false};
    auto it = have.find(name);
    if (it == have.end() || it->second.rows() != m.rows() || it->second.cols() != m.cols()) {
      ck.err.max_rel = ck.err.max_abs = std::numeric_limits<double>::infinity();
    } else {
      ck.err.max_abs = (it->second - m).cwiseAbs().maxCoeff();
      const double scale = m.cwiseAbs().maxCoeff();  // a vanishing gradient (the key bias) against the model's
      ck.err.max_rel = verify::relative_error(ck.err.max_abs, scale > 1e-9 * model_scale ? scale : model_scale);  // 0/0: all zero, agree
    }
    ck.pass = ck.err.within(tol);
    row.checks.push_back(ck);
  }
  *out = std::move(row);
  if (figures) {
    figures->on = true;
    figures->layout = lay;
    for (std::size_t r = 0; r < peaks.size(); r += 2) figures->peak_bytes.push_back(static_cast<std::size_t>(peaks[r]));
    figures->wait_s = st.wait_seconds;
    figures->compute_s = st.compute_seconds;
  }
  if (trace) *trace = std::move(events);
}

}  // namespace sv
