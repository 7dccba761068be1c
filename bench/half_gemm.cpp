// bench/half_gemm — the local GEMM on 16-bit storage (Eigen::bfloat16, Eigen::half) with fp32
// accumulation: what CpuBackend::gemm does against a direct kernel, one thread, square n × n,
// C := A·B. Two binaries from this file: bench_half_gemm_blas (shardalg::blas: the float GEMM is
// cblas_sgemm; run with OPENBLAS_NUM_THREADS=1) and bench_half_gemm (Eigen's own float GEMM).
//
//   BM_f32_gemm/n                 CpuBackend::gemm<float>: the floor under every 16-bit path
//   BM_bf16_backend/n             CpuBackend::gemm<bfloat16>: A, B → float, the float GEMM, C → bf16 once
//   BM_f16_backend/n              the same on Eigen::half
//   BM_bf16_direct/n              a blocked direct kernel: a panel of B's rows converted once per
//                                 k-block, each row of C accumulated in a float row (axpy), rounded once
//
// Before timing, each 16-bit path's result at n = 256 is checked against the derived bound of
// precision/bounds.hpp (error/bound ≤ 1, else the benchmark reports an error).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include <shardalg/backend/cpu/backend.hpp>
#include <shardalg/precision/bounds.hpp>

using namespace shardalg;
template <class T>
using M = CpuBackend::matrix<T>;

namespace {

template <class T>
M<T> random_half(Index n, unsigned seed) {
  std::srand(seed);
  const M<float> f = M<float>::Random(n, n);
  return f.unaryExpr([](float x) { return T(x); });
}
template <class T>
M<float> widen(const M<T>& m) {
  return m.unaryExpr([](T x) { return static_cast<float>(x); });
}

void flops(benchmark::State& st, double n) {
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

/// C := A·B by the direct kernel: k-blocks of kb rows of B converted to float once, each row of C
/// a float accumulator row updated by axpy, rounded to T at the end.
template <class T>
void direct_gemm(const M<T>& A, const M<T>& B, M<T>& C) {
  const Index m = A.rows(), k = A.cols(), n = B.cols(), kb = 128;
  M<float> acc = M<float>::Zero(m, n), panel(kb, n);
  for (Index l0 = 0; l0 < k; l0 += kb) {
    const Index lw = std::min(kb, k - l0);
    for (Index l = 0; l < lw; ++l)
      for (Index j = 0; j < n; ++j) panel(l, j) = static_cast<float>(B(l0 + l, j));
    for (Index i = 0; i < m; ++i) {
      float* __restrict crow = acc.data() + i * n;
      for (Index l = 0; l < lw; ++l) {
        const float a = static_cast<float>(A(i, l0 + l));
        const float* __restrict brow = panel.data() + l * n;
        for (Index j = 0; j < n; ++j) crow[j] += a * brow[j];
      }
    }
  }
  for (Index i = 0; i < m * n; ++i) C.data()[i] = T(acc.data()[i]);
}

/// error/bound of a 16-bit result against the exact product of its stored operands.
template <class T>
double check(const M<T>& A, const M<T>& B, const M<T>& C) {
  const Eigen::MatrixXd a = widen(A).template cast<double>(), b = widen(B).template cast<double>();
  const Eigen::MatrixXd c = widen(C).template cast<double>();
  const precision::Types t{precision::format_of<T>, precision::Format::f32};
  return precision::error_over_bound(c, a * b, precision::product_bound(a, b, t));
}

template <class T, class F>
void run_half(benchmark::State& st, F gemm) {
  {
    const M<T> A = random_half<T>(256, 1), B = random_half<T>(256, 2);
    M<T> C(256, 256);
    gemm(A, B, C);
    const double r = check(A, B, C);
    st.counters["err/bound"] = r;
    if (!(r <= 1.0)) {
      st.SkipWithError("the result exceeds the derived bound");
      return;
    }
  }
  const Index n = st.range(0);
  const M<T> A = random_half<T>(n, 3), B = random_half<T>(n, 4);
  M<T> C(n, n);
  for (auto _ : st) {
    gemm(A, B, C);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  flops(st, static_cast<double>(n));
}

template <class T>
void backend_gemm(const M<T>& A, const M<T>& B, M<T>& C) {
  CpuBackend::gemm(T(1.0f), CpuBackend::view(A), CpuBackend::view(B), T(0.0f), C);
}

void BM_f32_gemm(benchmark::State& st) {
  const Index n = st.range(0);
  const M<float> A = M<float>::Random(n, n), B = M<float>::Random(n, n);
  M<float> C(n, n);
  for (auto _ : st) {
    CpuBackend::gemm(1.0f, CpuBackend::view(A), CpuBackend::view(B), 0.0f, C);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  flops(st, static_cast<double>(n));
}
void BM_bf16_backend(benchmark::State& st) { run_half<Eigen::bfloat16>(st, backend_gemm<Eigen::bfloat16>); }
void BM_f16_backend(benchmark::State& st) { run_half<Eigen::half>(st, backend_gemm<Eigen::half>); }
void BM_bf16_direct(benchmark::State& st) { run_half<Eigen::bfloat16>(st, direct_gemm<Eigen::bfloat16>); }

}  // namespace

BENCHMARK(BM_f32_gemm)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_bf16_backend)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_f16_backend)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_bf16_direct)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
