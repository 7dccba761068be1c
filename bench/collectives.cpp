// bench/collectives — shardalg's collectives beside the raw MPI calls, run with `mpirun -np 2`.
// Every MPI benchmark times each iteration between barriers and reports the maximum over ranks
// (manual time), so both ranks run the same iteration counts and the figure is the collective's.
//
//   BM_raw_MPI_Allreduce/bytes              MPI_Allreduce(MPI_IN_PLACE) on a float buffer
//   BM_shardalg_all_reduce/bytes            all_reduce(Z[Partial]) → Z[R] (in place on the block),
//                                           paired with MPI_Allreduce on a buffer of its own: each
//                                           iteration runs both, counter vs_base = ours / raw
//   BM_raw_vs_raw/bytes                     the paired measurement's control (A/A): MPI_Allreduce on one
//                                           buffer against MPI_Allreduce on another; its vs_base is the
//                                           noise of a paired ratio, not a cost
//   BM_raw_MPI_Reduce_scatter_block/bytes   the native reduce-scatter, for reference
//   BM_shardalg_reduce_scatter/bytes        reduce_scatter<RowSharded>(Z[Partial]) (ring), paired with
//                                           MPI_Allreduce of the same size (vs_base = RS / all-reduce)
//   BM_raw_MPI_Sendrecv/bytes               exchange of the half a 2-rank reduce-scatter moves (the copy c)
//   BM_local_add/bytes                      out := landed + mine over that half (the add a); a ring
//                                           all-reduce is a reduce-scatter plus one more exchange c,
//                                           which bounds RS / all-reduce (docs/performance.md)
//   BM_thread_all_reduce/bytes              ThreadComm, 2 thread ranks in process 0 (process 1
//                                           idles without spinning), same buffer size
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include "common.hpp"
#include <shardalg/mpi.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace shardalg;
using M = CpuBackend::matrix<float>;

namespace {

using bench::world_rank;
using bench::world_size;
using bench::idle_barrier;


// bench::timed, plus the buffer size as bytes processed.
template <class Op>
void timed(benchmark::State& st, Op&& op) {
  bench::timed(st, op);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

Index rows_for(std::int64_t bytes) { return static_cast<Index>(bytes / sizeof(float) / 256); }  // 256 columns

/// The raw baseline (alone, and in the paired benchmarks): in-place MPI_Allreduce on a float buffer.
struct RawAllreduce {
  std::vector<float> buf;
  explicit RawAllreduce(std::int64_t bytes) : buf(static_cast<std::size_t>(bytes) / sizeof(float), 1.0f) {}
  void operator()() {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
};

void BM_raw_MPI_Allreduce(benchmark::State& st) {
  RawAllreduce raw(st.range(0));
  timed(st, raw);
}

void BM_shardalg_all_reduce(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  const Index r = rows_for(st.range(0));
  Sharded<float, Partial> z(M::Constant(r, 256, 1.0f), r, 256, g);
  RawAllreduce raw(st.range(0));
  bench::paired(
      st,
      [&] {
        auto y = all_reduce(std::move(z));                             // in place on z's block
        z = Sharded<float, Partial>(std::move(y).local(), r, 256, g);  // reuse it next time
      },
      raw);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

void BM_raw_vs_raw(benchmark::State& st) {
  RawAllreduce a(st.range(0)), b(st.range(0));
  bench::paired(st, a, b);
}

void BM_raw_MPI_Reduce_scatter_block(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(st.range(0)) / sizeof(float);
  std::vector<float> in(n, 1.0f), out(n / world_size);
  timed(st, [&] {
    MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
}

void BM_shardalg_reduce_scatter(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  const Index r = rows_for(st.range(0));
  const Sharded<float, Partial> z(M::Constant(r, 256, 1.0f), r, 256, g);
  RawAllreduce raw(st.range(0));
  bench::paired(
      st,
      [&] {
        auto y = reduce_scatter<RowSharded>(z);
        benchmark::DoNotOptimize(y.local().data());
      },
      raw);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

// The two parts of a 2-rank reduce-scatter of V bytes: exchanging V/2 with the peer, and adding it.
void BM_raw_MPI_Sendrecv(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(st.range(0)) / sizeof(float) / world_size;
  std::vector<float> out(n, 1.0f), in(n);
  const int peer = (world_rank + 1) % world_size;
  timed(st, [&] {
    MPI_Sendrecv(out.data(), static_cast<int>(n), MPI_FLOAT, peer, 0, in.data(), static_cast<int>(n), MPI_FLOAT, peer,
                 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  });
}
void BM_local_add(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(st.range(0)) / sizeof(float) / world_size;
  std::vector<float> mine(n, 1.0f), landed(n, 2.0f), out(n);
  timed(st, [&] {
    for (std::size_t i = 0; i < n; ++i) out[i] = landed[i] + mine[i];
    benchmark::DoNotOptimize(out.data());
  });
}

// ThreadComm: two thread ranks inside process 0. Rank 1 runs as many all-reduces as the
// benchmark loop will (state.max_iterations), so the two stay in step.
void BM_thread_all_reduce(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(st.range(0)) / sizeof(float);
  const auto iters = st.max_iterations;
  run_ranks(2, [&](ThreadComm& c) {
    bench::pin_this_thread(c.rank());
    std::vector<float> buf(n, 1.0f);
    if (c.rank() == 0) {
      for (auto _ : st) c.all_reduce(buf.data(), n, DType::f32, ReduceOp::sum);
    } else {
      for (benchmark::IterationCount i = 0; i < iters; ++i) c.all_reduce(buf.data(), n, DType::f32, ReduceOp::sum);
    }
  });
  bench::pin_this_thread(world_rank);
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

}  // namespace

int main(int argc, char** argv) {
  bench::init(argc, argv);
  set_local_threads(1);
  // Fixed iteration counts keep both ranks in lockstep whatever the timings: enough to move at
  // least 64 MiB per measurement (1024 iterations at 64 KiB), and never fewer than 30. Sizes are
  // the outer loop, so each ratio divides two benchmarks that ran next to each other: a drift of
  // the machine's speed during the run (another tenant, frequency) does not land in one column.
  auto one = [](const char* name, auto fn, std::int64_t bytes, bool manual) {
    auto* b = benchmark::RegisterBenchmark(name, fn)->Arg(bytes)->Unit(benchmark::kMicrosecond);
    b->Iterations(std::max<std::int64_t>(30, (std::int64_t{64} << 20) / bytes));
    if (manual) b->UseManualTime();
    else b->UseRealTime();
  };
  constexpr std::int64_t kMin = 64 << 10, kMax = 16 << 20;
  for (std::int64_t bytes = kMin; bytes <= kMax; bytes *= 4) {
    one("BM_raw_MPI_Allreduce", BM_raw_MPI_Allreduce, bytes, true);
    one("BM_shardalg_all_reduce", BM_shardalg_all_reduce, bytes, true);
    one("BM_raw_vs_raw", BM_raw_vs_raw, bytes, true);
    one("BM_raw_MPI_Reduce_scatter_block", BM_raw_MPI_Reduce_scatter_block, bytes, true);
    one("BM_shardalg_reduce_scatter", BM_shardalg_reduce_scatter, bytes, true);
    one("BM_raw_MPI_Sendrecv", BM_raw_MPI_Sendrecv, bytes, true);
    one("BM_local_add", BM_local_add, bytes, true);
  }
  // Thread ranks live in process 0 alone (process 1 idles in run_and_finalize): registered last.
  if (world_rank == 0)
    for (std::int64_t bytes = kMin; bytes <= kMax; bytes *= 4) one("BM_thread_all_reduce", BM_thread_all_reduce, bytes, false);
  bench::run_and_finalize();
}
