// shardalg/backend/cuda/sim_comm.hpp — the simulated multi-rank communicator on one GPU.
//
//   run_device_ranks(4, [&](SimDeviceComm& comm) {     // 4 host threads, one GPU
//     Group g = comm;                                   // each rank: its own Context (stream, cuBLAS)
//     auto w = shard<ColSharded, Eigen::MatrixXf, CudaBackend>(W, g);
//     auto y = matmul(x, w);                            // local cuBLAS GEMM on this rank's stream
//     auto z = all_reduce(matmul(y, w2));               // device copies + a rank-ordered reduction kernel
//   });
//
// Why: NCCL refuses two ranks on the same GPU, so TP = 2 and 4 cannot be tested with NCCL on one
// device. Here every rank is a host thread with its own stream; a collective exchanges device
// pointers through the thread world (comm/sim_world.hpp: ThreadComm's protocol with these ops) and
// each rank computes its share from its peers' buffers with cudaMemcpyAsync (device to device)
// and `kernels::reduce_ranks`, which combines in rank order so replicated results are bitwise
// equal on every rank. A fence (cudaStreamSynchronize) before every rendezvous orders the
// streams: simple, correct, and not meant to be fast.
//
// Host buffers (e.g. the core's replicas_agree passes the address of a host int) are handled:
// copies use cudaMemcpyDefault (unified addressing) and a reduction over host buffers runs on
// the host after the fence.
#pragma once

#if !defined(__CUDACC__)
#error "shardalg/backend/cuda/sim_comm.hpp needs the CUDA compiler: compile this translation unit as .cu"
#endif

#include <cuda_runtime.h>

#include <memory>
#include <tuple>

#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/device_kernels.cuh"
#include "shardalg/comm/sim_world.hpp"
#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda {

/// Data movement of a simulated rank: its own stream on the shared GPU.
class CudaSimOps {
 public:
  static constexpr std::string_view name = "SimComm";
  explicit CudaSimOps(cudaStream_t s) : stream_(s) {}

  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src) SHARDALG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  /// dst(k)[i] := src(0)[i] ⊕ … for every k: the rank-ordered kernel into dst(0) (each element
  /// read from every source before it is written, so dst(0) may be a source), then copies.
  template <class Dst, class Src>
  void reduce(int ndst, Dst&& dst, int nsrc, Src&& src, std::size_t n, DType t, ReduceOp op) {
    if (nsrc > kernels::kMaxSimRanks)
      throw CommError(shardalg::detail::cat("SimComm: at most ", kernels::kMaxSimRanks, " simulated ranks, got ", nsrc));
    void* out = dst(0);
    if (!is_device_pointer(out)) {  // host buffers: reduce on the host once queued work is done
      fence();
      HostSimOps{}.reduce(ndst, dst, nsrc, src, n, t, op);
      return;
    }
    kernels::SrcList list{};
    for (int s = 0; s < nsrc; ++s) list.p[s] = src(s);
    const int code = op == ReduceOp::sum ? 0 : op == ReduceOp::max ? 1 : 2;
    const unsigned blocks = kernels::blocks_for(n);
    switch (t) {
      case DType::f32: kernels::reduce_ranks<float><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<float*>(out), list, nsrc, n, code); break;
      case DType::f64: kernels::reduce_ranks<double><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<double*>(out), list, nsrc, n, code); break;
      case DType::i32: kernels::reduce_ranks<std::int32_t><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<std::int32_t*>(out), list, nsrc, n, code); break;
      case DType::i64: kernels::reduce_ranks<std::int64_t><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<std::int64_t*>(out), list, nsrc, n, code); break;
      case DType::bf16: kernels::reduce_ranks<bf16><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<bf16*>(out), list, nsrc, n, code); break;
      case DType::f16: kernels::reduce_ranks<f16><<<blocks, kernels::kThreads, 0, stream_>>>(static_cast<f16*>(out), list, nsrc, n, code); break;
      default: throw CudaError(shardalg::detail::cat("SimComm: no device reduction for ", to_string(t)));
    }
    SHARDALG_CUDA_CHECK(cudaGetLastError());
    for (int k = 1; k < ndst; ++k) copy(dst(k), out, n * size_of(t));
  }
  void fence() { SHARDALG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* stage(std::size_t bytes) {
    void* p = nullptr;
    SHARDALG_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
  }
  static void release(void* p) {
    if (p) cudaFree(p);
  }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_;
};

using SimDeviceComm = SimComm<CudaSimOps>;
static_assert(Communicator<SimDeviceComm>);

namespace detail {
/// A rank thread's CUDA context, installed as the thread's current context while it lives.
struct RankContext {
  Context ctx;
  ContextScope scope;
  explicit RankContext(int device) : ctx(device), scope(ctx) {}
};
}  // namespace detail

/// Run fn(SimDeviceComm&) on n host threads sharing GPU `device`; each rank gets its own Context
/// (stream + cuBLAS handle), installed as its thread's current one, so CudaBackend work of rank r
/// runs on rank r's stream. Groups made from `comm` must not outlive fn.
template <class Fn>
void run_device_ranks(int n, Fn&& fn, int device = 0) {
  run_sim_ranks<CudaSimOps>(
      n,
      [device](int) {
        auto rc = std::make_shared<detail::RankContext>(device);
        return std::tuple{std::make_shared<CudaSimOps>(rc->ctx.stream()), rc};
      },
      std::forward<Fn>(fn));
}

}  // namespace shardalg::cuda
