// shardalg/backend/cuda/error.hpp — CUDA, cuBLAS and NCCL status codes as exceptions, and the one
// question every test and benchmark asks first: is there a usable GPU here?
//
// Compiles as plain C++ (host compiler + the CUDA runtime headers); kernels are elsewhere.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "shardalg/base/errors.hpp"

namespace shardalg::cuda {

/// A failed CUDA runtime, cuBLAS or NCCL call; the message names the call and the status.
struct CudaError : Error {
  using Error::Error;
};

namespace detail {
[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw CudaError(shardalg::detail::cat("CUDA error ", static_cast<int>(e), " (", cudaGetErrorName(e), ": ",
                                        cudaGetErrorString(e), ") in ", what, " at ", file, ":", line));
}
}  // namespace detail

#define SHARDALG_CUDA_CHECK(call)                                                                 \
  do {                                                                                            \
    const cudaError_t shardalg_cuda_e_ = (call);                                                  \
    if (shardalg_cuda_e_ != cudaSuccess)                                                          \
      ::shardalg::cuda::detail::throw_cuda(shardalg_cuda_e_, #call, __FILE__, __LINE__);         \
  } while (0)

/// Whether a CUDA device can be used, and if not, why (for skip messages).
struct DeviceProbe {
  int count = 0;
  std::string reason;  // empty when count > 0
  [[nodiscard]] bool available() const { return count > 0; }
};

/// cudaGetDeviceCount, never throwing: no driver, no device and a broken driver all read as
/// "no GPU" with the runtime's own words. Clears the sticky error state it may leave.
inline DeviceProbe probe_devices() {
  DeviceProbe p;
  const cudaError_t e = cudaGetDeviceCount(&p.count);
  if (e != cudaSuccess) {
    p.count = 0;
    p.reason = shardalg::detail::cat("cudaGetDeviceCount failed: ", cudaGetErrorName(e), " (",
                                     cudaGetErrorString(e), ")");
    (void)cudaGetLastError();
  } else if (p.count == 0) {
    p.reason = "cudaGetDeviceCount returned 0 devices";
  }
  return p;
}

}  // namespace shardalg::cuda
