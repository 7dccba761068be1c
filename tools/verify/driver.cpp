// tools/verify/driver.cpp — ranks, progress, the reports and the trace.
#include "driver.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "data_parallel.hpp"
#include "pipeline.hpp"
#include "report_json.hpp"
#include "report_text.hpp"
#include "run_rank.hpp"
#include "trace.hpp"

namespace sv {

namespace {

/// A progress line on stderr (rank 0), once the run has taken more than a second: rewritten in
/// place on a terminal; on a pipe, a line per new phase and otherwise one per second at most.
struct Progress {
  bool enabled = true, tty = false;
  Clock::time_point start = Clock::now(), last{};
  bool printed = false;
  void operator()(const std::string& what, bool phase) {
    if (!enabled) return;
    const auto now = Clock::now();
    const double el = std::chrono::duration<double>(now - start).count();
    if (el < 1.0) return;
    if (!tty && !phase && std::chrono::duration<double>(now - last).count() < 1.0) return;
    last = now;
    const std::string line = fmt::format("[shardalg-verify {:.1f} s] {}", el, what);
    if (tty) fmt::print(stderr, "\r\033[K{}", line);
    else fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
    printed = true;
  }
  void done() {
    if (tty && printed) {
      fmt::print(stderr, "\r\033[K");
      std::fflush(stderr);
    }
  }
};

template <class T>
int run_all(const Options& o, int p, Group* mpi_world, int mpi_rank) {
  const bool root = mpi_world == nullptr || mpi_rank == 0;
  Progress progress;
  progress.tty = isatty(2) != 0;
  progress.enabled = root && o.progress != "never";
  if (o.progress == "always") progress.start = Clock::now() - std::chrono::seconds(2);
  const std::function<void(const std::string&, bool)> prog = [&](const std::string& s, bool phase) { progress(s, phase); };
  const DenseModel dm = make_model(o);
  RankResult res;
  res.dp = o.dp;
  // One rank of the world: with --dp, the mesh dp × tp; the layer-by-layer run on its tp group
  // (every replica runs the whole batch, rank 0's is reported), then DataParallelGpt on the mesh.
  auto one_rank = [&](Group world, bool is_root) {
    if (o.pp > 1 || o.microbatches > 0) {  // --pp: a dp × pp (× cp) × tp mesh; the layer-by-layer run on each tp group
      const Mesh mesh = o.cp > 1 ? Mesh(world, {{"dp", o.dp}, {"pp", o.pp}, {"cp", o.cp}, {"tp", p}})
                                 : Mesh(world, {{"dp", o.dp}, {"pp", o.pp}, {"tp", p}});
      if (o.sp) run_rank<T, true>(mesh.group("tp"), o, dm, is_root ? &res : nullptr, prog);
      else run_rank<T, false>(mesh.group("tp"), o, dm, is_root ? &res : nullptr, prog);
      if (is_root) prog("pipeline " + o.schedule + " on the mesh", true);
      const DenseRun* dense = is_root ? &res.dense : nullptr;
      Row row;
      std::vector<std::string> trace;
      if (o.sp) run_pp<T, true>(mesh, o, dm, dense, &row, is_root ? &res.pp_figures : nullptr, &trace);
      else run_pp<T, false>(mesh, o, dm, dense, &row, is_root ? &res.pp_figures : nullptr, &trace);
      if (is_root) {
        res.rows.push_back(std::move(row));
        if (!o.trace.empty()) res.trace_events = std::move(trace);  // the schedule as executed, one row per rank
      }
      return;
    }
    if (o.dp == 1 && o.cp == 1) {
      if (o.sp) run_rank<T, true>(world, o, dm, is_root ? &res : nullptr, prog);
      else run_rank<T, false>(world, o, dm, is_root ? &res : nullptr, prog);
      return;
    }
    const Mesh mesh = o.cp > 1 ? Mesh(world, {{"dp", o.dp}, {"cp", o.cp}, {"tp", p}}) : Mesh(world, {{"dp", o.dp}, {"tp", p}});
    if (o.sp) run_rank<T, true>(mesh.group("tp"), o, dm, is_root ? &res : nullptr, prog);
    else run_rank<T, false>(mesh.group("tp"), o, dm, is_root ? &res : nullptr, prog);
    if (is_root) prog("DataParallelGpt on the mesh", true);
    const DenseRun* dense = is_root ? &res.dense : nullptr;
    Row row, cp_row;
    if (o.sp) run_dp<T, true>(mesh, o, dm, dense, &row, is_root ? &res.dp_figures : nullptr, &cp_row);
    else run_dp<T, false>(mesh, o, dm, dense, &row, is_root ? &res.dp_figures : nullptr, &cp_row);
    if (is_root) res.rows.push_back(std::move(row));
    if (is_root && o.cp > 1) res.rows.push_back(std::move(cp_row));
  };
  if (mpi_world) {
    res.backend_name = o.dp > 1 ? fmt::format("MpiComm ({} processes: dp {} × tp {})", p * o.dp, o.dp, p)
                                : fmt::format("MpiComm ({} processes)", p);
    if (o.cp > 1) res.backend_name = fmt::format("MpiComm ({} processes: dp {} × cp {} × tp {})", p * o.dp * o.cp, o.dp, o.cp, p);
    if (o.pp > 1)
      res.backend_name = fmt::format("MpiComm ({} processes: dp {} × pp {}{} × tp {})", p * o.dp * o.pp * o.cp, o.dp, o.pp,
                                     o.cp > 1 ? fmt::format(" × cp {}", o.cp) : "", p);
    one_rank(*mpi_world, root);
  } else {
    res.backend_name = o.dp > 1 ? fmt::format("ThreadComm ({} ranks as threads: dp {} × tp {})", p * o.dp, o.dp, p)
                                : fmt::format("ThreadComm ({} ranks as threads in this process)", p);
    if (o.cp > 1)
      res.backend_name = fmt::format("ThreadComm ({} ranks as threads: dp {} × cp {} × tp {})", p * o.dp * o.cp, o.dp, o.cp, p);
    if (o.pp > 1)
      res.backend_name = fmt::format("ThreadComm ({} ranks as threads: dp {} × pp {}{} × tp {})", p * o.dp * o.pp * o.cp, o.dp,
                                     o.pp, o.cp > 1 ? fmt::format(" × cp {}", o.cp) : "", p);
    run_ranks(p * o.dp * o.pp * o.cp, [&](ThreadComm& c) { one_rank(Group(c), c.rank() == 0); });
  }
  progress.done();
  if (!root) return 0;
  bool pass = true;
  for (const auto& row : res.rows) pass = pass && row.pass();
  if (res.explain) pass = pass && res.explain->pass();  // and matmul<To> plans the block's own collectives
  const Index padded = nn::padded_vocab(o.vocab, o.vocab_divisor, p);
  if (o.json) fmt::print("{}\n", format_json(o, p, res, pass, padded));
  else fmt::print("{}", format_text(o, p, res, pass, padded));
  if (!o.trace.empty()) {
    const std::size_t n = write_trace(o.trace, res.trace_events, p, res.backend_name);
    if (!o.json) fmt::print("trace    {} events written to {} (open in https://ui.perfetto.dev)\n", n, o.trace);
  }
  std::fflush(stdout);
  return pass ? 0 : 1;
}

}  // namespace

int run(const Options& o, int p, Group* mpi_world, int mpi_rank) {
  return o.is_double() ? run_all<double>(o, p, mpi_world, mpi_rank) : run_all<float>(o, p, mpi_world, mpi_rank);
}

bool under_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace sv
