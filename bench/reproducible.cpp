// bench/reproducible — what MpiComm's reproducible mode costs (issue 14), run with
// `mpirun -np 2` or `-np 4`. Each benchmark is a paired measurement (bench::paired): every
// iteration runs the reproducible collective and the default one back to back on buffers of
// their own, each timed between barriers as the slowest process; the counter vs_base is
// Σ reproducible / Σ default, so a ratio comes from one run with the machine's drifts cancelled.
//
//   BM_repro_all_reduce/bytes       reproducible all_reduce (Alltoallv in segments, rank-order
//                                   sum, Allgatherv) vs the default MPI_Allreduce (in place)
//   BM_repro_reduce_scatter/bytes   reproducible reduce_scatter (Alltoallv, rank-order sum) vs the
//                                   default ring over MPI_Isend/Irecv; bytes = the whole input V
//   BM_default_vs_default/bytes     the control (A/A): MPI_Allreduce against MPI_Allreduce; its
//                                   vs_base is the noise of a paired ratio
//
// bytes: the buffer size V (float). Not run by the tests; bench/run does not run it either:
//   mpirun -np 4 --bind-to none build/…/bench/bench_reproducible --benchmark_repetitions=5 \
//          --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <shardalg/mpi.hpp>
#include <vector>

#include "common.hpp"

using namespace shardalg;

namespace {

using bench::world_size;

MpiComm comm(bool reproducible) {
  MpiComm c(MPI_COMM_WORLD);
  c.set_reproducible(reproducible);
  return c;
}

/// An all-reduce of V bytes (floats) on a buffer of its own, in one mode.
struct AllReduce {
  MpiComm c;
  std::vector<float> buf;
  AllReduce(bool repro, std::int64_t bytes) : c(comm(repro)), buf(static_cast<std::size_t>(bytes) / sizeof(float), 1.0f) {}
  void operator()() {
    std::fill(buf.begin(), buf.end(), 1.0f);  // keep the values finite (both sides pay it)
    c.all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  }
};

/// A reduce-scatter of a V-byte input into V/P bytes, in one mode.
struct ReduceScatter {
  MpiComm c;
  std::vector<float> in, out;
  ReduceScatter(bool repro, std::int64_t bytes)
      : c(comm(repro)),
        in(static_cast<std::size_t>(bytes) / sizeof(float), 1.0f),
        out(in.size() / static_cast<std::size_t>(world_size)) {}
  void operator()() {
    c.reduce_scatter(in.data(), out.data(), out.size(), DType::f32, ReduceOp::sum);
    benchmark::DoNotOptimize(out.data());
  }
};

void BM_repro_all_reduce(benchmark::State& st) {
  AllReduce ours(true, st.range(0)), base(false, st.range(0));
  bench::paired(st, ours, base);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}
void BM_repro_reduce_scatter(benchmark::State& st) {
  ReduceScatter ours(true, st.range(0)), base(false, st.range(0));
  bench::paired(st, ours, base);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}
void BM_default_vs_default(benchmark::State& st) {
  AllReduce a(false, st.range(0)), b(false, st.range(0));
  bench::paired(st, a, b);
}

}  // namespace

int main(int argc, char** argv) {
  bench::init(argc, argv);
  set_local_threads(1);
  // Fixed iteration counts keep the processes in lockstep (as bench/collectives): at least 64 MiB
  // per measurement and never fewer than 30 iterations. Sizes are the outer loop.
  auto one = [](const char* name, auto fn, std::int64_t bytes) {
    benchmark::RegisterBenchmark(name, fn)
        ->Arg(bytes)
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(std::max<std::int64_t>(30, (std::int64_t{64} << 20) / bytes))
        ->UseManualTime();
  };
  for (std::int64_t bytes : {std::int64_t{4} << 10, std::int64_t{64} << 10, std::int64_t{1} << 20,
                             std::int64_t{16} << 20}) {
    one("BM_repro_all_reduce", BM_repro_all_reduce, bytes);
    one("BM_repro_reduce_scatter", BM_repro_reduce_scatter, bytes);
    one("BM_default_vs_default", BM_default_vs_default, bytes);
  }
  bench::run_and_finalize();
}
