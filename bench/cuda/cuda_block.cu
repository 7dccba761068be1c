// bench/cuda/cuda_block.cu — one pre-LN transformer block (nn::TransformerBlock: LayerNorm,
// causal attention, GeLU MLP, dropout, residuals), forward + backward, bf16 storage with fp32
// accumulation, at TP = 1 on one GPU, through the same nn code the CPU runs (CudaBackend +
// nn::Kernels<CudaBackend>).
//
//   bench_cuda_block [hidden heads seq batch iters]      defaults: 4096 32 2048 2 10
//
// FLOPs, counted analytically (multiply-add = 2), T = batch·seq tokens, h hidden, F = 4h, MHA:
//   forward   QKV 6Th² + QKᵀ 2Tsh + P·V 2Tsh + proj 2Th² + MLP 4ThF = 24Th² + 4Tsh
//   backward  twice the forward (each GEMM has a data and a weight gradient; attention: dV, dP,
//             dQ, dK)                                                  = 48Th² + 8Tsh
//   total     72Th² + 12Tsh = 72·T·h²·(1 + s/(6h))   (Megatron's count without the vocabulary)
// The attention GEMMs are counted in full (s×s): the non-flash kernels compute the masked half
// too. Norms, softmax, GeLU and dropout are not counted.
//
// Reported: median time per forward + backward over `iters` timed iterations (CUDA events on the
// context's stream, after 2 warm-up iterations), TFLOP/s, and the fraction of the device's dense
// bf16 peak: H100 SXM and H200 989 TFLOP/s, H100 NVL 835, H100 PCIe 756 (other devices: the
// fraction is left out; SHARDALG_PEAK_TFLOPS overrides). Every output of the block is allocated
// per call from the device's memory pool (backend/cuda/allocator.hpp: stream-ordered, kept after
// the warm-up), which this figure includes; the pool's bytes in use and peak are printed.
// Without a GPU the binary says why and exits 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardalg/shardalg.hpp"
#include "shardalg/cuda.hpp"
#include "shardalg/nn.hpp"

using namespace shardalg;
using cuda::bf16;
using cuda::CudaBackend;

namespace {

/// Dense bf16 tensor-core peak (no sparsity) of known devices, TFLOP/s; 0 when unknown.
double bf16_peak_tflops(const std::string& name) {
  if (const char* env = std::getenv("SHARDALG_PEAK_TFLOPS")) return std::atof(env);
  if (name.find("H200") != std::string::npos) return 989.0;
  if (name.find("H100") != std::string::npos) {
    if (name.find("PCIe") != std::string::npos) return 756.0;
    if (name.find("NVL") != std::string::npos) return 835.0;
    return 989.0;  // SXM
  }
  return 0.0;
}

Index arg(int argc, char** argv, int i, Index def) { return argc > i ? std::atol(argv[i]) : def; }

}  // namespace

int main(int argc, char** argv) {
  const auto probe = cuda::probe_devices();
  if (!probe.available()) {
    std::printf("bench_cuda_block: no usable CUDA device (%s); nothing to measure.\n", probe.reason.c_str());
    return 0;
  }
  const Index h = arg(argc, argv, 1, 4096), heads = arg(argc, argv, 2, 32), seq = arg(argc, argv, 3, 2048),
              batch = arg(argc, argv, 4, 2);
  const int iters = std::max(1, static_cast<int>(arg(argc, argv, 5, 10)));
  const Index T = batch * seq, ffn = 4 * h;
  const double flop = 72.0 * T * h * h + 12.0 * T * seq * h;

  cudaDeviceProp prop{};
  SHARDALG_CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda::current().device()));
  const double peak = bf16_peak_tflops(prop.name);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  std::printf("block: hidden %ld, heads %ld, seq %ld, batch %ld (T = %ld tokens), ffn %ld, LayerNorm, GeLU tanh, "
              "dropout 0.1, bf16, TP = 1\n",
              static_cast<long>(h), static_cast<long>(heads), static_cast<long>(seq), static_cast<long>(batch),
              static_cast<long>(T), static_cast<long>(ffn));
  std::printf("FLOP per forward + backward: 72·T·h² + 12·T·s·h = %.4g\n", flop);

  Group g = SelfComm{};
  nn::BlockConfig cfg;
  cfg.hidden = h;
  cfg.heads = heads;
  cfg.seq = seq;
  cfg.ffn = ffn;
  cfg.dropout = 0.1;
  cfg.dropout_seed = 1;
  std::printf("initialising the weights (index-keyed normals, generated on the host) ...\n");
  const auto blk = nn::TransformerBlock<bf16, CudaBackend>::init(cfg, g, nn::InitConfig{});
  const auto x = nn::from_global<bf16, Replicated, CudaBackend>(
      T, h, g, [](Index i, Index j) { return nn::normal_at(7, 1, i, j); });
  const auto dy = nn::from_global<bf16, Replicated, CudaBackend>(
      T, h, g, [](Index i, Index j) { return nn::normal_at(7, 2, i, j); });

  {  // which attention path the block takes (nn/layers/attention.hpp asks the same question)
    const nn::AttnShape shape{batch, seq, heads, 1, h / heads};
#if defined(SHARDALG_WITH_CUDNN)
    std::string why;
    const bool fused =
        nn::Kernels<CudaBackend>::flash_supported(cuda::DeviceMatrix<bf16>(T, heads * shape.unit_width()), shape, &why);
    if (fused) std::printf("attention: fused (cuDNN %zu)\n", cuda::cudnn::version());
    else std::printf("attention: unfused (cuDNN refused: %s)\n", why.c_str());
#else
    (void)shape;
    std::printf("attention: unfused (built without shardalg::cudnn)\n");
#endif
  }
  auto step = [&] {
    auto f = blk.forward(x);
    auto gr = blk.backward(f.cache, dy);
    (void)gr;
  };
  cudaEvent_t a, b;
  SHARDALG_CUDA_CHECK(cudaEventCreate(&a));
  SHARDALG_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) step();  // warm-up: cuBLAS heuristics, first allocations
  cuda::current().synchronize();
  cuda::reset_memory_peak();
  std::vector<double> ms, host_ms;  // host_ms: the host's time to issue one step (no GPU wait in it)
  for (int i = 0; i < iters; ++i) {
    SHARDALG_CUDA_CHECK(cudaEventRecord(a, cuda::current_stream()));
    const auto t0 = std::chrono::steady_clock::now();
    step();
    host_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    SHARDALG_CUDA_CHECK(cudaEventRecord(b, cuda::current_stream()));
    SHARDALG_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    SHARDALG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const cuda::MemoryStats mem = cuda::memory_stats();
  std::printf("device memory pool: %.1f MiB in use between steps, peak %.1f MiB during a step, %.1f MiB reserved\n",
              static_cast<double>(mem.in_use) / (1 << 20), static_cast<double>(mem.peak) / (1 << 20),
              static_cast<double>(mem.reserved) / (1 << 20));
  std::sort(ms.begin(), ms.end());
  std::sort(host_ms.begin(), host_ms.end());
  std::printf("host: median %.3f ms to issue one forward + backward (the GPU waits on the host when this nears the step)\n",
              host_ms[host_ms.size() / 2]);
  const double med = ms[ms.size() / 2];
  const double tflops = flop / (med * 1e-3) / 1e12;
  std::printf("forward + backward: median %.3f ms over %d iterations (min %.3f, max %.3f)\n", med, iters, ms.front(),
              ms.back());
  if (peak > 0)
    std::printf("throughput: %.1f TFLOP/s = %.1f%% of the dense bf16 peak (%.0f TFLOP/s)\n", tflops,
                100.0 * tflops / peak, peak);
  else
    std::printf("throughput: %.1f TFLOP/s (dense bf16 peak of this device unknown; set SHARDALG_PEAK_TFLOPS)\n", tflops);
  return 0;
}
