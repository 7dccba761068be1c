// bench/cuda/cuda_gemm.cu — the cost of shardalg's GEMM path over raw cuBLAS, and an MLP block.
//
//   BM_raw_gemmex/<T>/<n>        cublasGemmEx on n×n×n, written out here by hand
//   BM_backend_gemm/<T>/<n>      CudaBackend::gemm on views (the call the core's matmul makes)
//   BM_sharded_matmul/<T>/<n>    matmul(Sharded[R], Sharded[C]) at TP = 1 through a one-rank
//                                group: the full core path, including the output allocation
//   BM_mlp_fwd_bwd_bf16/<T>/<h>  an MLP block (X·W1 → GeLU → ·W2, and its backward: 6 GEMMs +
//                                2 GeLU kernels) in bf16 at TP = 1; 48·T·h² FLOP. The two GeLU
//                                outputs are allocated per call from the device's memory pool
//                                (backend/cuda/allocator.hpp), which this figure includes.
//
// GPU time per iteration is measured with CUDA events (UseManualTime); the TFLOP/s counter is
// 2·m·n·k per GEMM over that time. The goal of issue 7 is backend/raw ≥ 0.97. The fraction of
// peak uses 989 TFLOP/s (H100/H200 SXM dense bf16; fp32 non-tensor peak is ~67 TFLOP/s).
#include <benchmark/benchmark.h>

#include <cstdio>

#include "shardalg/shardalg.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using namespace shardalg::cuda;

namespace {

constexpr double kBf16PeakTflops = 989.0;
constexpr int kReps = 10;  // GEMMs per timed iteration

/// Time `body` (enqueued kReps times) on the current stream with CUDA events.
template <class F>
void timed(benchmark::State& state, double flop_per_call, F&& body) {
  cudaEvent_t a, b;
  SHARDALG_CUDA_CHECK(cudaEventCreate(&a));
  SHARDALG_CUDA_CHECK(cudaEventCreate(&b));
  body();  // warm-up (cuBLAS heuristics, allocations)
  current().synchronize();
  for (auto _ : state) {
    SHARDALG_CUDA_CHECK(cudaEventRecord(a, current_stream()));
    for (int i = 0; i < kReps; ++i) body();
    SHARDALG_CUDA_CHECK(cudaEventRecord(b, current_stream()));
    SHARDALG_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SHARDALG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(flop_per_call * kReps * static_cast<double>(state.iterations()) / 1e12, benchmark::Counter::kIsRate);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

template <class T>
DeviceMatrix<T> rnd(Index r, Index c, unsigned seed) {
  std::srand(seed);
  return DeviceMatrix<T>(CpuBackend::matrix<float>(CpuBackend::matrix<float>::Random(r, c)));
}

template <class T>
void BM_raw_gemmex(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto A = rnd<T>(n, n, 1), B = rnd<T>(n, n, 2);
  DeviceMatrix<T> C(n, n);
  const float alpha = 1, beta = 0;
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  timed(state, 2.0 * n * n * n, [&] {
    // Row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ.
    SHARDALG_CUBLAS_CHECK(cublasGemmEx(current().blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, B.data(),
                                       cuda_data_type<T>, n, A.data(), cuda_data_type<T>, n, &beta, C.data(),
                                       cuda_data_type<T>, n, compute, CUBLAS_GEMM_DEFAULT));
  });
}

template <class T>
void BM_backend_gemm(benchmark::State& state) {
  const Index n = state.range(0);
  auto A = rnd<T>(n, n, 1), B = rnd<T>(n, n, 2);
  DeviceMatrix<T> C(n, n);
  timed(state, 2.0 * n * n * n,
        [&] { CudaBackend::gemm(1.0f, CudaBackend::view(A), CudaBackend::view(B), 0.0f, C); });
}

void BM_sharded_matmul(benchmark::State& state) {
  const Index n = state.range(0);
  Group g = SelfComm{};
  const CpuBackend::matrix<float> a = CpuBackend::matrix<float>::Random(n, n), b = CpuBackend::matrix<float>::Random(n, n);
  auto x = shard<Replicated, CpuBackend::matrix<float>, CudaBackend>(a, g);
  auto w = shard<ColSharded, CpuBackend::matrix<float>, CudaBackend>(b, g);
  timed(state, 2.0 * n * n * n, [&] { benchmark::DoNotOptimize(matmul(x, w)); });
}

void BM_mlp_fwd_bwd_bf16(benchmark::State& state) {
  const Index h = state.range(0), T = 4096, f = 4 * h;
  auto X = rnd<bf16>(T, h, 1), W1 = rnd<bf16>(h, f, 2), W2 = rnd<bf16>(f, h, 3), dY = rnd<bf16>(T, h, 4);
  DeviceMatrix<bf16> A(T, f), Y(T, h), dH(T, f), dW1(h, f), dW2(f, h), dX(T, h);
  using B = CudaBackend;
  timed(state, 48.0 * T * h * h, [&] {
    B::gemm(1.0f, B::view(X), B::view(W1), 0.0f, A);            // A = X·W1
    auto H = B::map(A, nn::GeluTanh{});                           // H = GeLU(A), the layers' functor
    B::gemm(1.0f, B::view(H), B::view(W2), 0.0f, Y);            // Y = H·W2
    B::gemm(1.0f, B::view(H, true), B::view(dY), 0.0f, dW2);    // dW2 = Hᵀ·dY
    B::gemm(1.0f, B::view(dY), B::view(W2, true), 0.0f, dH);    // dH = dY·W2ᵀ
    auto dA = B::zip(dH, B::map(A, nn::GeluTanhGrad{}), fn::times{});  // dA = dH ⊙ GeLU'(A)
    B::gemm(1.0f, B::view(X, true), B::view(dA), 0.0f, dW1);    // dW1 = Xᵀ·dA
    B::gemm(1.0f, B::view(dA), B::view(W1, true), 0.0f, dX);    // dX = dA·W1ᵀ
  });
}

}  // namespace

BENCHMARK(BM_raw_gemmex<float>)->Arg(1024)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_backend_gemm<float>)->Arg(1024)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_raw_gemmex<bf16>)->Arg(1024)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_backend_gemm<bf16>)->Arg(1024)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sharded_matmul)->Arg(1024)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_fwd_bwd_bf16)->Arg(1024)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  const auto probe = probe_devices();
  if (!probe.available()) {
    std::printf("bench_cuda_gemm: no usable CUDA device (%s); nothing to measure.\n", probe.reason.c_str());
    return 0;
  }
  std::printf("dense bf16 peak assumed for fractions: %.0f TFLOP/s (H100/H200 SXM)\n", kBf16PeakTflops);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
