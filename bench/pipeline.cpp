// bench/pipeline.cpp — pipeline::Executor measured (issue 16), run by hand:
//
//   build/…/bench/bench_pipeline                       threads (ThreadComm)
//   mpirun -np 4 build/…/bench/bench_pipeline          MpiComm (p = 4)
//   bench_pipeline --json results.json                 the figures as JSON too
//
// 1. The bubble, measured against the simulator: p = 4, m = 8, each schedule, on stages whose
//    ops sleep for fixed times (t_F = 4, t_B = 4, t_W = 4 ms per whole-rank op; a chunk op 1/v of
//    that) and send 64 KiB activations. A sleeping op leaves the cores free, so the executor's
//    dependencies and messages are measured without four ranks fighting over two cores. Measured
//    bubble = (makespan − busy)/busy, busy = the largest Σ compute of a rank; simulated = the
//    simulator's (makespan − ideal)/ideal with the same costs.
// 2. The GPT (nn::PipelineGpt, 8 layers of hidden 128: 2 per stage, 1 per chunk; TP = 1, double) at p = 4,
//    m = 8: its measured bubble, and the simulator's with the mean measured op times (noisy when
//    the ranks outnumber the cores); and the peak bytes each stage holds with and without output
//    deallocation (measured by the executor from the matrices).
// 3. Blocking against overlapped receives: the same sleeping stages with 4 MiB messages, 1F1B and
//    ZB-H1, median makespan of 11 runs each (pairs alternated, one warm-up pair dropped), overlapped ÷ blocking.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "shardalg/nn/models/pipeline_gpt.hpp"
#include "shardalg/pipeline/executor.hpp"
#include "shardalg/pipeline/simulate.hpp"
#include "shardalg/shardalg.hpp"
#if defined(SHARDALG_BENCH_MPI)
#include "shardalg/comm/mpi.hpp"
#endif

using namespace shardalg;
namespace pl = shardalg::pipeline;

namespace {

/// A stage whose ops sleep: t_F, t_B, t_W seconds per whole-rank op (1/v per chunk op); its
/// activation is a rows × cols X[R] of zeros.
struct SleepStage {
  using Act = Sharded<double, Replicated>;
  struct State {};
  Group tp_;
  Index rows = 64, cols = 128;
  double tF = 0.004, tB = 0.004, tW = 0.004;
  int p = 1, v = 1, rank = 0;

  Group tp() const { return tp_; }
  pl::ActShape shape(int) const { return {rows, 1, cols}; }
  bool last(int c) const { return c * p + rank == v * p - 1; }
  bool first(int c) const { return c * p + rank == 0; }
  static void sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
  Act out() const { return Act(CpuBackend::zeros<double>(rows, cols), rows, cols, tp_); }
  std::optional<Act> forward(int c, int, std::optional<Act>, State&) {
    sleep(tF / v);
    if (last(c)) return std::nullopt;
    return out();
  }
  std::optional<Act> backward(int c, int, State&, std::optional<Act>, bool w) {
    sleep((w ? tB + tW : tB) / v);
    if (first(c)) return std::nullopt;
    return out();
  }
  void weights(int, int, State&) { sleep(tW / v); }
  std::size_t bytes(const State&) const { return 0; }
};

pl::Schedule make_schedule(const std::string& name, int p, int m) {
  if (name == "AFAB") return pl::afab(p, m);
  if (name == "1F1B") return pl::one_f_one_b(p, m);
  if (name == "interleaved 1F1B") return pl::interleaved_1f1b(p, m, 2);
  return pl::zb_h1(p, m);
}
const std::vector<std::string> kSchedules = {"AFAB", "1F1B", "interleaved 1F1B", "ZB-H1"};

/// Every rank's RunStats of one run, gathered to all (makespan, busy, mean op times).
struct Timeline {
  double makespan = 0, busy = 0;
  double tF = 0, tB = 0, tW = 0, tBW = 0;  // mean op times (whole-rank: × v)
};
Timeline summarize(Group world, const pl::Schedule& s, const pl::RunStats& st) {
  double mine[6] = {0, 0, 0, 0, 0, 0};  // end, busy, ΣF, ΣB, ΣW, ΣBW
  double n[4] = {0, 0, 0, 0};
  for (const auto& op : st.ops) {
    mine[0] = std::max(mine[0], op.end);
    mine[1] += op.compute();
    const int k = static_cast<int>(op.op.kind);  // F, B, W, BW
    mine[2 + k] += op.compute();
    n[k] += 1;
  }
  double mx[2] = {mine[0], mine[1]};
  world.all_reduce(mx, 2, DType::f64, ReduceOp::max, CallInfo{"-", "-", true});
  double sums[8] = {mine[2], mine[3], mine[4], mine[5], n[0], n[1], n[2], n[3]};
  world.all_reduce(sums, 8, DType::f64, ReduceOp::sum, CallInfo{"-", "-", true});
  Timeline t{mx[0], mx[1]};
  const auto mean = [&](int k) { return sums[4 + k] > 0 ? sums[k] / sums[4 + k] * s.v : 0.0; };
  t.tF = mean(0), t.tB = mean(1), t.tW = mean(2), t.tBW = mean(3);
  return t;
}

struct Row {
  std::string what, schedule;
  double measured = 0, simulated = 0, closed = 0, makespan = 0;
};

template <class World>
void bubble_sleep(World& world, int p, int m, std::vector<Row>& rows) {
  for (const auto& name : kSchedules) {
    const auto s = make_schedule(name, p, m);
    SleepStage st;
    st.tp_ = SelfComm{};
    st.p = p, st.v = s.v, st.rank = world.rank();
    pl::Executor<SleepStage> ex(world, s, {});
    ex.run(st);  // warm-up
    const auto run = ex.run(st);
    const Timeline t = summarize(world, s, run);
    const auto sim = pl::simulate(s, pl::Costs{st.tF, st.tB, st.tW});
    const double closed = name == "ZB-H1" ? (p - 1.0) / (3.0 * m) : (p - 1.0) / (s.v * m);
    rows.push_back({"sleeping stages", name, (t.makespan - t.busy) / t.busy, sim.bubble_fraction, closed, t.makespan});
  }
}

template <class World>
void gpt_runs(World& world, int p, int m, std::vector<Row>& rows, std::vector<std::vector<std::size_t>>& peaks) {
  nn::GptConfig c;
  c.vocab = 512, c.hidden = 128, c.heads = 4, c.layers = 8, c.seq = 64, c.batch = 2 * m, c.dropout = 0.0;
  for (const auto& name : kSchedules) {
    const auto s = make_schedule(name, p, m);
    const int S = p * s.v, k = static_cast<int>(c.layers) / S;  // 8 layers: 2 per stage, 1 per chunk
    const nn::GptConfig& cc = c;
    std::string lay = "E";
    for (int i = 0; i < S; ++i) lay += std::string(static_cast<std::size_t>(k), 't') + (i + 1 < S ? "|" : "L");
    Mesh mesh(world, {{"pp", p}, {"tp", 1}});
    auto model = nn::PipelineGpt<double>::init(cc, pl::parse_layout(lay, p, static_cast<int>(cc.layers)), mesh);
    std::vector<std::int64_t> x(static_cast<std::size_t>(cc.tokens())), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int64_t>(i * 7 % 512), y[i] = static_cast<std::int64_t>(i * 3 % 512);
    std::vector<std::size_t> peak(2);
    pl::RunStats last;
    for (bool dealloc : {false, true}) {
      pl::ExecOptions o;
      o.deallocate_outputs = dealloc;
      pl::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"), s, o);
      model.set_microbatches(nn::split_microbatches(x, y, cc.seq, m), nn::LossScaling::microbatches);
      ex.run(model);  // warm-up
      model.set_microbatches(nn::split_microbatches(x, y, cc.seq, m), nn::LossScaling::microbatches);
      last = ex.run(model);
      peak[dealloc ? 1 : 0] = last.peak_bytes;
    }
    const Timeline t = summarize(world, s, last);
    // The fused backward's mean time stands for t_B + t_W (t_W = 0); ZB-H1 measures both.
    const auto sim = pl::simulate(s, name == "ZB-H1" ? pl::Costs{t.tF, t.tB, t.tW} : pl::Costs{t.tF, t.tBW, 0.0});
    const double closed = name == "ZB-H1" ? (p - 1.0) / (3.0 * m) : (p - 1.0) / (s.v * m);
    rows.push_back({"GPT h128, 8 layers", name, (t.makespan - t.busy) / t.busy, sim.bubble_fraction, closed, t.makespan});
    // peaks of every rank: [with, without] per rank, gathered
    std::vector<double> all(static_cast<std::size_t>(2 * p), 0.0);
    all[static_cast<std::size_t>(2 * world.rank())] = static_cast<double>(peak[0]);
    all[static_cast<std::size_t>(2 * world.rank() + 1)] = static_cast<double>(peak[1]);
    Group g = world;
    g.all_reduce(all.data(), all.size(), DType::f64, ReduceOp::sum, CallInfo{"-", "-", true});
    std::vector<std::size_t> flat;
    for (double v : all) flat.push_back(static_cast<std::size_t>(v));
    peaks.push_back(flat);
  }
}

template <class World>
std::vector<double> overlap_ratio(World& world, int p, int m, const std::string& name) {
  const auto s = make_schedule(name, p, m);
  SleepStage st;
  st.tp_ = SelfComm{};
  st.p = p, st.v = s.v, st.rank = world.rank();
  st.rows = 2048, st.cols = 256;  // 4 MiB per message
  std::vector<double> t[2];
  for (int rep = 0; rep < 12; ++rep)
    for (int k = 0; k < 2; ++k) {
      const bool overlap = (k + rep) % 2 == 1;  // alternate which goes first
      pl::ExecOptions o;
      o.overlap_p2p = overlap;
      pl::Executor<SleepStage> ex(world, s, o);
      const auto run = ex.run(st);
      if (rep > 0) t[overlap ? 1 : 0].push_back(summarize(world, s, run).makespan);
    }
  for (auto& v : t) std::sort(v.begin(), v.end());
  const double blocking = t[0][t[0].size() / 2], overlapped = t[1][t[1].size() / 2];
  return {blocking, overlapped, overlapped / blocking};
}

template <class World>
void run_all(World& world, bool print, const std::string& json_path, const std::string& backend) {
  const int p = world.size(), m = 8;
  std::vector<Row> rows;
  bubble_sleep(world, p, m, rows);
  std::vector<std::vector<std::size_t>> peaks;
  gpt_runs(world, p, m, rows, peaks);
  const auto ov1 = overlap_ratio(world, p, m, "1F1B");
  const auto ovz = overlap_ratio(world, p, m, "ZB-H1");
  if (!print) return;
  fmt::print("pipeline executor, p = {}, m = {}, {}\n\n", p, m, backend);
  fmt::print("{:<26} {:<18} {:>10} {:>10} {:>12} {:>10}\n", "stages", "schedule", "measured", "simulated", "closed form",
             "makespan");
  for (const auto& r : rows)
    fmt::print("{:<26} {:<18} {:>10.4f} {:>10.4f} {:>12.4f} {:>8.1f} ms\n", r.what, r.schedule, r.measured, r.simulated,
               r.closed, 1e3 * r.makespan);
  fmt::print("\npeak bytes held per stage (GPT), without / with output deallocation\n");
  for (std::size_t k = 0; k < kSchedules.size(); ++k) {
    fmt::print("{:<18}", kSchedules[k]);
    for (int r = 0; r < p; ++r)
      fmt::print("  rank {}: {} / {}", r, peaks[k][static_cast<std::size_t>(2 * r)], peaks[k][static_cast<std::size_t>(2 * r + 1)]);
    fmt::print("\n");
  }
  fmt::print("\nreceives blocking vs overlapped (4 MiB messages, median of 11): 1F1B {:.1f} / {:.1f} ms = {:.3f}; "
             "ZB-H1 {:.1f} / {:.1f} ms = {:.3f}\n",
             1e3 * ov1[0], 1e3 * ov1[1], ov1[2], 1e3 * ovz[0], 1e3 * ovz[1], ovz[2]);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"backend\": \"" << backend << "\", \"p\": " << p << ", \"m\": " << m << ", \"bubble\": [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      f << (i ? ", " : "") << "{\"stages\": \"" << rows[i].what << "\", \"schedule\": \"" << rows[i].schedule
        << "\", \"measured\": " << rows[i].measured << ", \"simulated\": " << rows[i].simulated
        << ", \"closed\": " << rows[i].closed << ", \"makespan_s\": " << rows[i].makespan << "}";
    f << "], \"overlap\": {\"1F1B\": " << ov1[2] << ", \"ZB-H1\": " << ovz[2] << "}}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_pipeline: the pipeline executor's bubble, memory and overlap"};
  std::string json;
  int ranks = 4;
  app.add_option("--json", json, "also write the figures as JSON to FILE");
  app.add_option("--ranks", ranks, "pipeline ranks on threads (under mpirun: the process count)");
  CLI11_PARSE(app, argc, argv);
#if defined(SHARDALG_BENCH_MPI)
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) {
    MPI_Init(&argc, &argv);
    {
      MpiComm c(MPI_COMM_WORLD);
      Group world = c;
      run_all(world, c.rank() == 0, json, "MpiComm");
    }
    MPI_Finalize();
    return 0;
  }
#endif
  run_ranks(ranks, [&](ThreadComm& c) {
    Group world = c;
    run_all(world, c.rank() == 0, json, "ThreadComm");
  });
  return 0;
}
