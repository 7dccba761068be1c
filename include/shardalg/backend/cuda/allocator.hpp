// shardalg/backend/cuda/allocator.hpp — device memory for DeviceMatrix: stream-ordered allocation
// from the device's memory pool, which keeps what it has reserved.
//
//   void* p = cuda::device_allocate(bytes, s);  // cudaMallocAsync from the device's default pool
//   cuda::device_free(p, s, s);                // cudaFreeAsync: reusable by later work on `stream`
//   cuda::MemoryStats s = cuda::memory_stats(); // bytes in use / peak / reserved, from the pool
//
// Why: cudaMalloc + cudaFree cost ~90–250 µs a pair on an H200 and cudaFree waits for the whole
// device; a block step allocates every output (~50 blocks), which was ~6 ms of a 22 ms step. The
// pool's release threshold is set to "never" (UINT64_MAX) once per device, so after the first
// step every allocation is a pool lookup (~1.3 µs measured) and nothing synchronises.
//
// Safety of a stream-ordered free: the block may be handed out again to work queued after the
// free *on the stream it was freed on* (and, by the pool's event tracking, to other streams once
// the free has run). So it must be freed on a stream ordered after every use:
//   * a block freed on the stream it was allocated on, by the thread whose context owns that
//     stream: every use of it by this backend was queued on that stream (the backend queues
//     everything on current().stream()); the simulated world's collectives read a peer's block
//     on the peer's stream but fence and meet before any rank leaves the collective
//     (comm/thread.hpp, finish()), so those reads are complete;
//   * a block freed by another thread or context (e.g. a rank's result destroyed on the main
//     thread after the rank's stream is gone): the device is synchronised first, then the block
//     is freed on the freeing thread's stream. Rare, and as safe as the cudaFree it replaces.
//
// Plain C++ (host compiler + CUDA runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>

#include "shardalg/backend/cuda/error.hpp"

namespace shardalg::cuda {

/// The pool's figures, in bytes: in use by live blocks (now and the high-water mark since the
/// last reset_memory_peak) and reserved from the device (what the pool holds, used or not).
struct MemoryStats {
  std::uint64_t in_use = 0, peak = 0, reserved = 0, reserved_peak = 0;
};

namespace detail {
/// The device's default pool, its release threshold set to "keep everything" on first use.
inline cudaMemPool_t prepared_pool(int device) {
  static std::mutex m;
  static std::set<int> prepared;
  cudaMemPool_t pool = nullptr;
  SHARDALG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::lock_guard lk(m);
  if (prepared.insert(device).second) {
    std::uint64_t keep = UINT64_MAX;
    SHARDALG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  return pool;
}
inline std::uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  std::uint64_t v = 0;
  SHARDALG_CUDA_CHECK(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}
inline int current_device_id() {
  int d = 0;
  SHARDALG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}
}  // namespace detail

/// `bytes` of device memory (current device), usable by work queued on `stream` after this call.
inline void* device_allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  (void)detail::prepared_pool(detail::current_device_id());
  void* p = nullptr;
  SHARDALG_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
  return p;
}

/// Give p back to the pool. `owner`: the stream it was allocated on; `current`: the freeing
/// thread's stream. Never throws (called from destructors); errors at process exit, when the
/// runtime is already unloading, are ignored.
inline void device_free(void* p, cudaStream_t owner, cudaStream_t current) noexcept {
  if (!p) return;
  if (owner != current) (void)cudaDeviceSynchronize();  // uses on another stream are complete
  if (cudaFreeAsync(p, current) != cudaSuccess) (void)cudaGetLastError();
}

/// The pool's figures for `device` (default: the current one).
inline MemoryStats memory_stats(int device = -1) {
  if (device < 0) SHARDALG_CUDA_CHECK(cudaGetDevice(&device));
  const cudaMemPool_t pool = detail::prepared_pool(device);
  return {detail::pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), detail::pool_attr(pool, cudaMemPoolAttrUsedMemHigh),
          detail::pool_attr(pool, cudaMemPoolAttrReservedMemCurrent),
          detail::pool_attr(pool, cudaMemPoolAttrReservedMemHigh)};
}

/// Restart the high-water marks (in use and reserved) at their current values.
inline void reset_memory_peak(int device = -1) {
  if (device < 0) SHARDALG_CUDA_CHECK(cudaGetDevice(&device));
  const cudaMemPool_t pool = detail::prepared_pool(device);
  std::uint64_t zero = 0;  // the high-water attributes accept only 0: "reset to the current value"
  SHARDALG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  SHARDALG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
}

/// Return the pool's unused reservations to the device (e.g. before handing memory to another
/// library that calls cudaMalloc itself).
inline void trim_pool(int device = -1) {
  if (device < 0) SHARDALG_CUDA_CHECK(cudaGetDevice(&device));
  SHARDALG_CUDA_CHECK(cudaDeviceSynchronize());
  SHARDALG_CUDA_CHECK(cudaMemPoolTrimTo(detail::prepared_pool(device), 0));
}

}  // namespace shardalg::cuda
