// bench/mlp — the tensor-parallel MLP and transformer block, forward + backward, fp32, with the
// baselines in the same binary (run with `mpirun -np 2`):
//
//   BM_gemm_rate               one cblas_sgemm of the MLP's shape on one core: the GEMM floor's rate
//   BM_strong_{mlp,block}_tp2  the same math by hand, as a performance engineer writes it
//                              (baseline.hpp: preallocated, fused, vectorised, cblas, in-place MPI)
//   BM_naive_mlp_tp2           the pre-issue-18 hand-written MLP (scalar GeLU, separate passes): naive
//   BM_shardalg_{mlp,block}_tp2_vs_strong   shardalg and the strong baseline paired (alternating):
//                              the counter vs_base = Σ shardalg / Σ strong
//   BM_shardalg_mlp_tp2        nn::Mlp over MpiComm, TP=2 (one rank per process)
//   BM_shardalg_mlp_tp1        nn::Mlp on one rank (process 0 alone; process 1 idles)
//   BM_shardalg_mlp_threads_tp2  nn::Mlp over ThreadComm, 2 thread ranks in process 0
//   BM_shardalg_block_{tp1,tp2,threads_tp2}   nn::TransformerBlock likewise
//   BM_shardalg_block_sp_tp2  nn::SequenceParallelBlock over MpiComm, TP=2 (norms and residual on T/P tokens)
//   BM_shardalg_{mlp,block}_tp1_both_busy     TP=1 on each process at once: the machine's own loss
//                                             when both cores work (the cap on TP=1 / TP=2)
//   BM_shardalg_{mlp,block}_tp2_overlap       TP=2 over MPI with Overlap::on: f's backward all-reduce
//                                             started before the weight-gradient GEMM (async dgrad)
//   BM_shardalg_mlp_tp2_auto                  Overlap::automatic, after its calibration calls
//   BM_column_backward_tp2/{0,1}              one ColumnParallelLinear backward, off / on, in the
//                                             shape where the all-reduce weighs most (out = 128)
//
// m = 2048 tokens, h = 1024, ffn = 4h, GeLU (tanh); per-rank times are the maximum over ranks.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include "../common.hpp"
#include "baseline.hpp"
#include <shardalg/mpi.hpp>
#include <shardalg/nn.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace shardalg;
using M = CpuBackend::matrix<float>;

namespace {

constexpr Index kTokens = 2048, kHidden = 1024, kFfn = 4 * kHidden, kSeq = 512, kHeads = 16;
using bench::world_rank;
using bench::world_size;
using bench::timed;
using bench::idle_barrier;

double mlp_flops() { return 12.0 * kTokens * kHidden * kFfn; }  // 2 GEMMs forward, 4 backward



// Work on process 0 only (TP=1, or thread ranks); the other processes wait without spinning,
// so process 0 has the cores it needs.
template <class Op>
void rank0_only(benchmark::State& st, Op&& op) {
  if (world_rank == 0) op();  // untimed, as bench::timed
  idle_barrier();
  for (auto _ : st) {  // process 0 times its own op; the barrier after it is not timed
    double t = 0;
    if (world_rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      op();
      t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    idle_barrier();
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    st.SetIterationTime(t);
  }
}

void flops(benchmark::State& st, double per_iteration) {
  st.counters["GFLOP/s"] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// ---- the GEMM floor: one core's sgemm rate on the MLP's largest shape ------------------------
void BM_gemm_rate(benchmark::State& st) {
  const int m = kTokens, k = kHidden, n = kFfn / 2;  // the per-rank fc1 shape at TP=2
  const M A = M::Random(m, k), B = M::Random(k, n);
  M C(m, n);
  timed(st, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A.data(), k, B.data(), n, 0.0f, C.data(), n);
  });
  flops(st, 2.0 * m * n * k);
}

// ---- the hand-written baselines (baseline.hpp) -------------------------------------------------
// strong: what a performance engineer writes without shardalg; naive: the pre-issue-18 baseline.
void BM_naive_mlp_tp2(benchmark::State& st) {
  bench::NaiveMlp hw(kTokens, kHidden, kFfn / world_size);
  timed(st, [&] { hw.step(); });
  flops(st, mlp_flops());
}

struct StrongMlpStep {
  bench::StrongMlp mlp{kTokens, kHidden, kFfn / world_size};
  M x = M::Random(kTokens, kHidden);
  void operator()() {
    mlp.forward(x);
    mlp.backward(x, mlp.z);  // dZ = Z, as the shardalg steps
    benchmark::DoNotOptimize(mlp.dx.data());
  }
};
void BM_strong_mlp_tp2(benchmark::State& st) {
  StrongMlpStep step;
  timed(st, step);
  flops(st, mlp_flops());
}

// ---- shardalg ------------------------------------------------------------------------------------
template <class G>
void mlp_step(const nn::Mlp<float>& mlp, const G& x) {
  auto f = mlp.forward(x);
  auto g = mlp.backward(f.cache, f.z);  // dZ = Z
  benchmark::DoNotOptimize(g.dx.local().data());
}

nn::Mlp<float> make_mlp(const Group& g) {
  return nn::Mlp<float>::init({kHidden, kFfn, nn::Activation::gelu_tanh, true}, g, nn::InitConfig{});
}

void BM_shardalg_mlp_tp2(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto mlp = make_mlp(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { mlp_step(mlp, x); });
  flops(st, mlp_flops());
}
// Paired with the strong baseline (bench/common.hpp: alternating, Σ ours / Σ base → vs_base).
void BM_shardalg_mlp_tp2_vs_strong(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto mlp = make_mlp(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  StrongMlpStep strong;
  bench::paired(st, [&] { mlp_step(mlp, x); }, strong);
  flops(st, mlp_flops());
}

// f's backward all-reduce overlapped with fc1's weight-gradient GEMM (MPI_Iallreduce + MPI_Test).
void BM_shardalg_mlp_tp2_overlap(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto mlp = make_mlp(g);
  mlp.set_overlap({nn::Overlap::on, 4});
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { mlp_step(mlp, x); });
  flops(st, mlp_flops());
}
// Overlap::automatic: the calibration calls run before the timed loop; the counter says what it chose.
void BM_shardalg_mlp_tp2_auto(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto mlp = make_mlp(g);
  mlp.set_overlap({nn::Overlap::automatic, 4});
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  for (int i = 0; i < 7; ++i) mlp_step(mlp, x);
  timed(st, [&] { mlp_step(mlp, x); });
  flops(st, mlp_flops());
  st.counters["overlap_chosen"] = mlp.fc1().overlap_chosen().value_or(false) ? 1 : 0;
}

// One column-parallel backward (dX, f's all-reduce, dW, db): m = 2048, in = 1024, out = 128, so the
// all-reduce of dX (8 MiB) is as large as it gets next to the GEMMs (2·m·in·out/P FLOP each).
void BM_column_backward_tp2(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto col = nn::ColumnParallelLinear<float>::init(kHidden, 128, true, g, nn::InitConfig{}.normal(), 1);
  col.set_overlap({st.range(0) ? nn::Overlap::on : nn::Overlap::off, 4});
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  auto f = col.forward(x);
  timed(st, [&] {
    auto gr = col.backward(f.cache, f.y);
    benchmark::DoNotOptimize(gr.dx.local().data());
  });
  flops(st, 2 * 2.0 * kTokens * kHidden * 128 / world_size);
}

void BM_shardalg_mlp_tp1(benchmark::State& st) {
  Group g = SelfComm{};
  auto mlp = make_mlp(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  rank0_only(st, [&] { mlp_step(mlp, x); });
  flops(st, mlp_flops());
}

// Thread ranks stay alive across iterations: rank 1 runs as many steps as the loop will.
template <class Make, class Step>
void threads_tp2(benchmark::State& st, Make make, Step step) {
  const auto iters = st.max_iterations;
  if (world_rank == 0) {
    run_ranks(2, [&](ThreadComm& c) {
      bench::pin_this_thread(c.rank());
      Group g = c;
      auto layer = make(g);
      auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
      step(layer, x);  // untimed, as bench::timed
      if (c.rank() == 0) {
        for (auto _ : st) step(layer, x);
      } else {
        for (benchmark::IterationCount i = 0; i < iters; ++i) step(layer, x);
      }
    });
    bench::pin_this_thread(world_rank);
  } else {
    for (auto _ : st) {
    }
  }
  idle_barrier();
}

void BM_shardalg_mlp_threads_tp2(benchmark::State& st) {
  threads_tp2(st, make_mlp, [](auto& mlp, auto& x) { mlp_step(mlp, x); });
  flops(st, mlp_flops());
}

// ---- one transformer block -----------------------------------------------------------------------
nn::TransformerBlock<float> make_block(const Group& g) {
  nn::BlockConfig c;
  c.hidden = kHidden;
  c.heads = kHeads;
  c.seq = kSeq;
  c.ffn = kFfn;
  return nn::TransformerBlock<float>::init(c, g, nn::InitConfig{});
}
// 24·T·h² + 2·T·(s + 1)·h forward (2 per multiply-add; QKᵀ and P·V over the causal triangle, the
// s(s + 1)/2 query–key pairs a causal head needs), backward 2×
double block_flops() {
  return 3.0 * (24.0 * kTokens * kHidden * kHidden + 2.0 * kTokens * (kSeq + 1) * kHidden);
}
template <class X>
void block_step(const nn::TransformerBlock<float>& b, const X& x) {
  auto f = b.forward(x);
  auto g = b.backward(f.cache, f.y);
  benchmark::DoNotOptimize(g.dx.local().data());
}

void BM_shardalg_block_tp2(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto b = make_block(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { block_step(b, x); });
  flops(st, block_flops());
}
struct StrongBlockStep {
  bench::StrongBlock blk{kTokens, kHidden, kHeads / world_size, kHidden / kHeads, kSeq, kFfn / world_size};
  M x = M::Random(kTokens, kHidden);
  void operator()() {
    blk.forward(x);
    blk.backward(blk.y);  // dY = Y, as the shardalg step
    benchmark::DoNotOptimize(blk.dx.data());
  }
};
void BM_strong_block_tp2(benchmark::State& st) {
  StrongBlockStep step;
  timed(st, step);
  flops(st, block_flops());
}
void BM_shardalg_block_tp2_vs_strong(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto b = make_block(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  StrongBlockStep strong;
  bench::paired(st, [&] { block_step(b, x); }, strong);
  flops(st, block_flops());
}
void BM_shardalg_block_tp2_overlap(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  auto b = make_block(g);
  b.set_overlap({nn::Overlap::on, 4});
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { block_step(b, x); });
  flops(st, block_flops());
}
void BM_shardalg_block_tp1(benchmark::State& st) {
  Group g = SelfComm{};
  auto b = make_block(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  rank0_only(st, [&] { block_step(b, x); });
  flops(st, block_flops());
}
void BM_shardalg_block_threads_tp2(benchmark::State& st) {
  threads_tp2(st, make_block, [](auto& b, auto& x) { block_step(b, x); });
  flops(st, block_flops());
}

// The block under sequence parallelism (nn/layers/sp_block.hpp): X[Row], the norms, dropout and residual
// adds on T/P tokens per rank, all_gather in and reduce_scatter out of each parallel region; the
// step includes reduce_grads (the norm weights' Partial gradients, one all_reduce of 2h each).
void BM_shardalg_block_sp_tp2(benchmark::State& st) {
  Group g = MpiComm(MPI_COMM_WORLD);
  nn::BlockConfig c;
  c.hidden = kHidden, c.heads = kHeads, c.seq = kSeq, c.ffn = kFfn;
  const auto b = nn::SequenceParallelBlock<float>::init(c, g, nn::InitConfig{});
  auto x = shard<RowSharded>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] {
    auto f = b.forward(x);
    auto gr = b.reduce_grads(b.backward(f.cache, f.y).params);
    benchmark::DoNotOptimize(gr.ln1.dgamma.local().data());
  });
  flops(st, block_flops());
}

// TP=1 on both cores at once: each process runs its own one-rank step (no communication), the
// time is the slower one's. Against BM_*_tp1 (the other core idle) it measures what the machine
// itself loses when both cores work (shared caches, memory bandwidth, clocks): the most a TP=2
// step on two busy cores could gain over TP=1 is 2 × tp1 / tp1_both_busy.
void BM_shardalg_mlp_tp1_both_busy(benchmark::State& st) {
  Group g = SelfComm{};
  auto mlp = make_mlp(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { mlp_step(mlp, x); });
  flops(st, mlp_flops());
}
void BM_shardalg_block_tp1_both_busy(benchmark::State& st) {
  Group g = SelfComm{};
  auto b = make_block(g);
  auto x = shard<Replicated>(M(M::Random(kTokens, kHidden)), g);
  timed(st, [&] { block_step(b, x); });
  flops(st, block_flops());
}

}  // namespace

int main(int argc, char** argv) {
  // Freed blocks stay mapped for the next step (backend/cpu/allocator.hpp), for every row alike;
  // SHARDALG_BENCH_DEFAULT_MALLOC=1 keeps glibc's defaults (bench/run's "default allocator" rows).
  if (!std::getenv("SHARDALG_BENCH_DEFAULT_MALLOC")) retain_freed_memory();
  bench::init(argc, argv);
  set_local_threads(1);  // one thread per rank: ranks × threads never exceed the cores
  auto manual = [](benchmark::internal::Benchmark* b) {
    b->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
  };
  manual(benchmark::RegisterBenchmark("BM_gemm_rate", BM_gemm_rate));
  manual(benchmark::RegisterBenchmark("BM_naive_mlp_tp2", BM_naive_mlp_tp2));
  manual(benchmark::RegisterBenchmark("BM_strong_mlp_tp2", BM_strong_mlp_tp2));
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp2", BM_shardalg_mlp_tp2));
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp2_vs_strong", BM_shardalg_mlp_tp2_vs_strong));
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp2_overlap", BM_shardalg_mlp_tp2_overlap));
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp2_auto", BM_shardalg_mlp_tp2_auto));
  benchmark::RegisterBenchmark("BM_column_backward_tp2", BM_column_backward_tp2)
      ->Arg(0)->Arg(1)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp1", BM_shardalg_mlp_tp1));
  benchmark::RegisterBenchmark("BM_shardalg_mlp_threads_tp2", BM_shardalg_mlp_threads_tp2)
      ->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
  manual(benchmark::RegisterBenchmark("BM_strong_block_tp2", BM_strong_block_tp2));
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_tp2", BM_shardalg_block_tp2));
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_tp2_vs_strong", BM_shardalg_block_tp2_vs_strong));
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_tp2_overlap", BM_shardalg_block_tp2_overlap));
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_tp1", BM_shardalg_block_tp1));
  benchmark::RegisterBenchmark("BM_shardalg_block_threads_tp2", BM_shardalg_block_threads_tp2)
      ->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_sp_tp2", BM_shardalg_block_sp_tp2));
  manual(benchmark::RegisterBenchmark("BM_shardalg_mlp_tp1_both_busy", BM_shardalg_mlp_tp1_both_busy));
  manual(benchmark::RegisterBenchmark("BM_shardalg_block_tp1_both_busy", BM_shardalg_block_tp1_both_busy));
  bench::run_and_finalize();
}
