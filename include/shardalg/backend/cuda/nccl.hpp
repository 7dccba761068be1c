// shardalg/backend/cuda/nccl.hpp — NcclComm: the Communicator concept over an NCCL communicator, every
// call enqueued on one stream (by default the current backend context's), so collectives are
// ordered with the GEMMs and kernels that produce and consume their buffers; nothing blocks the
// host except barrier().
//
//   all_reduce       ncclAllReduce, in place
//   all_gather       ncclAllGather (send may be recv + rank·n: NCCL's in-place form)
//   reduce_scatter   ncclReduceScatter (recvcount n)
//   all_to_all       grouped ncclSend/ncclRecv to every peer (NCCL has no all-to-all primitive)
//   all_to_allv      the same with counts per peer (displacements = prefix sums); zero counts skipped;
//                    the counts are not compared (NCCL would hang or truncate on a mismatch)
//   broadcast        ncclBroadcast, in place
//   send / recv      ncclSend / ncclRecv (blocking in the NCCL sense: pair them, or group them)
//   barrier          a one-element all-reduce, then a stream synchronise
//   iall_reduce      ncclAllReduce on a side stream (AsyncAllReduce): the main stream goes on
//                    with independent work — the weight-gradient GEMM of an overlapped
//                    ColumnParallelLinear backward — while NCCL's kernels run beside it
//
// Buffers are device memory. all_reduce and broadcast also accept host buffers (staged through
// device scratch), because the core's replica check reduces a host flag.
//
// One NCCL rank per GPU: NCCL 2.28 refuses two ranks on one device — on a single GPU use
// SimDeviceComm (sim_comm.hpp) for P > 1. Plain C++ (host compiler + CUDA runtime + NCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/error.hpp"

namespace shardalg::cuda {

namespace detail {
[[noreturn]] inline void throw_nccl(ncclResult_t r, const char* what, const char* file, int line) {
  throw CudaError(shardalg::detail::cat("NCCL error ", static_cast<int>(r), " (", ncclGetErrorString(r), ") in ", what,
                                        " at ", file, ":", line));
}
inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: break;
  }
  throw CudaError(shardalg::detail::cat("NcclComm: no NCCL datatype for ", to_string(t)));
}
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    default: return ncclSum;
  }
}
}  // namespace detail

#define SHARDALG_NCCL_CHECK(call)                                                                 \
  do {                                                                                            \
    const ncclResult_t shardalg_nccl_r_ = (call);                                                 \
    if (shardalg_nccl_r_ != ncclSuccess)                                                          \
      ::shardalg::cuda::detail::throw_nccl(shardalg_nccl_r_, #call, __FILE__, __LINE__);         \
  } while (0)

class NcclComm {
 public:
  /// A fresh unique id (rank 0 makes it and shares it out of band, e.g. with MPI_Bcast).
  static ncclUniqueId unique_id() {
    ncclUniqueId id;
    SHARDALG_NCCL_CHECK(ncclGetUniqueId(&id));
    return id;
  }
  /// Rank `rank` of `nranks`, on the calling thread's current device; collective over the ranks.
  static NcclComm init_rank(const ncclUniqueId& id, int nranks, int rank, cudaStream_t stream = current_stream()) {
    ncclComm_t c = nullptr;
    SHARDALG_NCCL_CHECK(ncclCommInitRank(&c, nranks, id, rank));
    return NcclComm(c, stream);
  }
  /// A one-rank NCCL communicator on the current device (P = 1: real NCCL calls on one GPU).
  static NcclComm single(cudaStream_t stream = current_stream()) {
    int dev = Context::current_device();
    ncclComm_t c = nullptr;
    SHARDALG_NCCL_CHECK(ncclCommInitAll(&c, 1, &dev));
    return NcclComm(c, stream);
  }
  /// Adopt an existing communicator (destroyed with the last copy of this handle).
  NcclComm(ncclComm_t comm, cudaStream_t stream) : s_(std::make_shared<State>(comm, stream)) {}

  /// ncclCommSplit: ranks with the same colour form a sub-communicator (collective).
  [[nodiscard]] NcclComm split(int color, int key) const {
    ncclComm_t c = nullptr;
    SHARDALG_NCCL_CHECK(ncclCommSplit(s_->comm, color, key, &c, nullptr));
    return NcclComm(c, s_->stream);
  }

  [[nodiscard]] int rank() const { return s_->rank; }
  [[nodiscard]] int size() const { return s_->size; }
  [[nodiscard]] std::uintptr_t key() const { return reinterpret_cast<std::uintptr_t>(s_.get()); }
  [[nodiscard]] ncclComm_t native() const { return s_->comm; }
  [[nodiscard]] cudaStream_t stream() const { return s_->stream; }

  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    if (!n) return;
    staged(buf, n * size_of(t), true, [&](void* d) {
      SHARDALG_NCCL_CHECK(ncclAllReduce(d, d, n, detail::nccl_type(t), detail::nccl_op(op), s_->comm, s_->stream));
    });
  }
  void all_gather(const void* send, void* recv, std::size_t n, DType t) {
    if (!n) return;
    SHARDALG_NCCL_CHECK(ncclAllGather(send, recv, n, detail::nccl_type(t), s_->comm, s_->stream));
  }
  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op) {
    if (!n) return;
    SHARDALG_NCCL_CHECK(
        ncclReduceScatter(send, recv, n, detail::nccl_type(t), detail::nccl_op(op), s_->comm, s_->stream));
  }
  void all_to_all(const void* send, void* recv, std::size_t n, DType t) {
    if (!n) return;
    const std::size_t bytes = n * size_of(t);
    SHARDALG_NCCL_CHECK(ncclGroupStart());
    for (int s = 0; s < size(); ++s) {
      SHARDALG_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + s * bytes, n, detail::nccl_type(t), s, s_->comm, s_->stream));
      SHARDALG_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + s * bytes, n, detail::nccl_type(t), s, s_->comm, s_->stream));
    }
    SHARDALG_NCCL_CHECK(ncclGroupEnd());
  }
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t) {
    const std::size_t es = size_of(t);
    std::size_t so = 0, ro = 0;
    SHARDALG_NCCL_CHECK(ncclGroupStart());
    for (int s = 0; s < size(); ++s) {
      if (send_counts[s])
        SHARDALG_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + so * es, send_counts[s], detail::nccl_type(t), s,
                                     s_->comm, s_->stream));
      if (recv_counts[s])
        SHARDALG_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + ro * es, recv_counts[s], detail::nccl_type(t), s,
                                     s_->comm, s_->stream));
      so += send_counts[s];
      ro += recv_counts[s];
    }
    SHARDALG_NCCL_CHECK(ncclGroupEnd());
  }
  void broadcast(void* buf, std::size_t n, DType t, int root) {
    check_peer(root, "broadcast root");
    if (!n) return;
    staged(buf, n * size_of(t), true, [&](void* d) {
      SHARDALG_NCCL_CHECK(ncclBroadcast(d, d, n, detail::nccl_type(t), root, s_->comm, s_->stream));
    });
  }
  void send(const void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "send peer");
    SHARDALG_NCCL_CHECK(ncclSend(buf, n, detail::nccl_type(t), peer, s_->comm, s_->stream));
  }
  void recv(void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "recv peer");
    SHARDALG_NCCL_CHECK(ncclRecv(buf, n, detail::nccl_type(t), peer, s_->comm, s_->stream));
  }
  void barrier() {
    SHARDALG_NCCL_CHECK(ncclAllReduce(s_->scratch(4), s_->scratch(4), 1, ncclInt32, ncclSum, s_->comm, s_->stream));
    SHARDALG_CUDA_CHECK(cudaStreamSynchronize(s_->stream));
  }

  /// Start buf := Σ_ranks buf on the side stream, after everything already queued on the main
  /// stream (an event orders it). The Request's wait() makes the main stream wait for the result
  /// (cudaStreamWaitEvent): stream-ordered, the host never blocks; test() asks whether it has
  /// finished. Host buffers take the blocking path.
  [[nodiscard]] Request iall_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    if (!n || !is_device_pointer(buf)) {
      all_reduce(buf, n, t, op);
      return {};
    }
    cudaStream_t side = s_->side_stream();
    Event ready;
    SHARDALG_CUDA_CHECK(cudaEventRecord(ready.e, s_->stream));
    SHARDALG_CUDA_CHECK(cudaStreamWaitEvent(side, ready.e, 0));
    SHARDALG_NCCL_CHECK(ncclAllReduce(buf, buf, n, detail::nccl_type(t), detail::nccl_op(op), s_->comm, side));
    Pending p{Event{}, s_->stream};
    SHARDALG_CUDA_CHECK(cudaEventRecord(p.done.e, side));
    return Request(std::move(p));
  }

 private:
  /// A cudaEvent_t without timing, owned (destroying one that a stream still waits on is safe).
  struct Event {
    cudaEvent_t e = nullptr;
    Event() { SHARDALG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }
    Event(Event&& o) noexcept : e(std::exchange(o.e, nullptr)) {}
    Event& operator=(Event&&) = delete;
    ~Event() {
      if (e) cudaEventDestroy(e);
    }
  };
  /// iall_reduce's Request: `done` is recorded on the side stream after the all-reduce.
  struct Pending {
    Event done;
    cudaStream_t main;
    bool test() {
      const cudaError_t r = cudaEventQuery(done.e);
      if (r == cudaErrorNotReady) return false;
      SHARDALG_CUDA_CHECK(r);
      return true;
    }
    void wait() { SHARDALG_CUDA_CHECK(cudaStreamWaitEvent(main, done.e, 0)); }
  };

  struct State {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaStream_t side = nullptr;  // iall_reduce's stream, made on first use
    int rank = 0, size = 1;
    void* buf = nullptr;
    std::size_t cap = 0;
    State(ncclComm_t c, cudaStream_t s) : comm(c), stream(s) {
      SHARDALG_NCCL_CHECK(ncclCommUserRank(comm, &rank));
      SHARDALG_NCCL_CHECK(ncclCommCount(comm, &size));
    }
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      if (stream) cudaStreamSynchronize(stream);
      if (side) {
        cudaStreamSynchronize(side);
        cudaStreamDestroy(side);
      }
      if (buf) cudaFree(buf);
      if (comm) ncclCommDestroy(comm);
    }
    /// Non-blocking, at the highest priority: the communication kernels are scheduled ahead of
    /// the GEMM they overlap with (as Megatron does for its async all-reduce).
    cudaStream_t side_stream() {
      if (!side) {
        int least = 0, greatest = 0;
        SHARDALG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        SHARDALG_CUDA_CHECK(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatest));
      }
      return side;
    }
    void* scratch(std::size_t bytes) {
      if (bytes > cap) {
        SHARDALG_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (buf) cudaFree(buf);
        buf = nullptr;
        SHARDALG_CUDA_CHECK(cudaMalloc(&buf, bytes));
        cap = bytes;
      }
      return buf;
    }
  };

  /// Run f on a device view of buf: buf itself, or device scratch copied in and out (host buffers).
  template <class F>
  void staged(void* buf, std::size_t bytes, bool copy_back, F&& f) {
    if (is_device_pointer(buf)) {
      f(buf);
      return;
    }
    void* d = s_->scratch(bytes);
    SHARDALG_CUDA_CHECK(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, s_->stream));
    f(d);
    if (copy_back) SHARDALG_CUDA_CHECK(cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, s_->stream));
    SHARDALG_CUDA_CHECK(cudaStreamSynchronize(s_->stream));
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(shardalg::detail::cat("NcclComm: ", what, " ", peer, " is outside a group of size ", size()));
  }

  std::shared_ptr<State> s_;
};

static_assert(Communicator<NcclComm> && AsyncAllReduce<NcclComm> && VariableAllToAll<NcclComm>);

}  // namespace shardalg::cuda
