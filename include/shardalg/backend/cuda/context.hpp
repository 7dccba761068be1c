// shardalg/backend/cuda/context.hpp — a backend context: one device, one stream, one cuBLAS handle.
//
// The core's backend policy is a set of static functions with no context argument, so the
// context is per host thread: `current()` is the context installed on this thread by a
// `ContextScope`, or else a lazily made default one for the thread (on the thread's current
// device). Every allocation, copy, kernel, GEMM and NCCL call of the backend is ordered on
// `current().stream()`. The simulated multi-rank world gives each rank thread its own context,
// so ranks are independent streams on one GPU, as they would be independent GPUs.
//
// Plain C++ (host compiler + CUDA runtime / cuBLAS headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "shardalg/backend/cuda/error.hpp"

namespace shardalg::cuda {

namespace detail {
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  throw CudaError(shardalg::detail::cat("cuBLAS error ", static_cast<int>(s), " (", cublasGetStatusName(s), ": ",
                                        cublasGetStatusString(s), ") in ", what, " at ", file, ":", line));
}
}  // namespace detail

#define SHARDALG_CUBLAS_CHECK(call)                                                               \
  do {                                                                                            \
    const cublasStatus_t shardalg_cublas_s_ = (call);                                             \
    if (shardalg_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::shardalg::cuda::detail::throw_cublas(shardalg_cublas_s_, #call, __FILE__, __LINE__);     \
  } while (0)

/// Floating-point GEMM policy for fp32 storage: exact fp32 (the default, what the 1e-5 checks
/// assume) or TF32 tensor cores (faster, ~1e-3 relative).
enum class Fp32Math { strict, tf32 };

class Context {
 public:
  /// A context on `device` with a fresh non-blocking stream and cuBLAS handle bound to it.
  explicit Context(int device = current_device()) : device_(device) {
    SHARDALG_CUDA_CHECK(cudaSetDevice(device_));
    SHARDALG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (const cublasStatus_t s = cublasCreate(&blas_); s != CUBLAS_STATUS_SUCCESS) {
      cudaStreamDestroy(stream_);
      detail::throw_cublas(s, "cublasCreate", __FILE__, __LINE__);
    }
    SHARDALG_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() {
    if (blas_) cublasDestroy(blas_);
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  [[nodiscard]] cublasHandle_t blas() const { return blas_; }
  [[nodiscard]] Fp32Math fp32_math() const { return fp32_math_; }
  void set_fp32_math(Fp32Math m) { fp32_math_ = m; }

  /// Block the host until everything queued on this context's stream has run.
  void synchronize() const { SHARDALG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  static int current_device() {
    int d = 0;
    SHARDALG_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Fp32Math fp32_math_ = Fp32Math::strict;
};

namespace detail {
inline Context*& installed_context() {
  thread_local Context* c = nullptr;
  return c;
}
inline std::unique_ptr<Context>& thread_default_slot() {
  thread_local std::unique_ptr<Context> c;
  return c;
}
inline Context& thread_default_context() {
  auto& c = thread_default_slot();
  if (!c) c = std::make_unique<Context>();
  return *c;
}
}  // namespace detail

/// The context the backend uses on this thread.
inline Context& current() {
  Context* c = detail::installed_context();
  return c ? *c : detail::thread_default_context();
}
inline cudaStream_t current_stream() { return current().stream(); }
/// The current context's stream if this thread has a context, else the legacy default stream
/// (0); makes no context (for destructors on threads that never ran backend work).
inline cudaStream_t current_stream_if_any() {
  if (Context* c = detail::installed_context()) return c->stream();
  if (const auto& d = detail::thread_default_slot()) return d->stream();
  return nullptr;
}

/// Whether p points to device memory (device or managed), as opposed to host memory.
inline bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/// Install `ctx` as this thread's current context for the scope's lifetime (nests).
class ContextScope {
 public:
  explicit ContextScope(Context& ctx) : prev_(std::exchange(detail::installed_context(), &ctx)) {
    SHARDALG_CUDA_CHECK(cudaSetDevice(ctx.device()));
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  ~ContextScope() { detail::installed_context() = prev_; }

 private:
  Context* prev_;
};

}  // namespace shardalg::cuda
