// bench/gemm — the local GEMM through shardalg vs the raw BLAS call, in one binary, one thread.
//
//   BM_raw_cblas_sgemm/n        cblas_sgemm on preallocated row-major buffers
//   BM_shardalg_matmul/n        matmul(X[R], W[R]) → Y[R] on a one-rank group (allocates Y)
//   BM_shardalg_matmul_tn/n     matmul(transpose(X), W): the backward pass's Xᵀ·dY form
// Ratio reported by bench/run: raw time / shardalg time (goal ≥ 0.97).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <shardalg/shardalg.hpp>

using namespace shardalg;
using M = CpuBackend::matrix<float>;

namespace {

void flops_counter(benchmark::State& st, double n) {
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

void BM_raw_cblas_sgemm(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  const M A = M::Random(n, n), B = M::Random(n, n);
  M C(n, n);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  flops_counter(st, n);
}

void BM_shardalg_matmul(benchmark::State& st) {
  const Index n = st.range(0);
  Group g = SelfComm{};
  const auto a = shard<Replicated>(M::Random(n, n), g), b = shard<Replicated>(M::Random(n, n), g);
  for (auto _ : st) {
    auto c = matmul(a, b);
    benchmark::DoNotOptimize(c.local().data());
    benchmark::ClobberMemory();
  }
  flops_counter(st, static_cast<double>(n));
}

void BM_shardalg_matmul_tn(benchmark::State& st) {
  const Index n = st.range(0);
  Group g = SelfComm{};
  const auto a = shard<Replicated>(M::Random(n, n), g), b = shard<Replicated>(M::Random(n, n), g);
  for (auto _ : st) {
    auto c = matmul(transpose(a), b);
    benchmark::DoNotOptimize(c.local().data());
    benchmark::ClobberMemory();
  }
  flops_counter(st, static_cast<double>(n));
}

}  // namespace

BENCHMARK(BM_raw_cblas_sgemm)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_shardalg_matmul)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_shardalg_matmul_tn)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  set_local_threads(1);  // the single-core rate: one thread per rank is the default policy
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
