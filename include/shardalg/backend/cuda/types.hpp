// shardalg/backend/cuda/types.hpp — the element types the CUDA backend stores: the core's Element types
// (float, double, int32, int64) plus bf16 and fp16 storage (CUDA's __nv_bfloat16 / __half),
// which always compute and accumulate in fp32.
//
// The 16-bit types are registered with the core's customisation points (`is_element_v`,
// `dtype_of`) below, so Sharded<bf16, L, CudaBackend> exists and its collectives carry DType::bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "shardalg/base/dtype.hpp"

#if defined(__CUDACC__)
#define SHARDALG_HD __host__ __device__
#else
#define SHARDALG_HD
#endif

namespace shardalg::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

template <class T>
concept HalfElement = std::same_as<T, bf16> || std::same_as<T, f16>;

/// What a CUDA matrix may hold.
template <class T>
concept CudaElement = Element<T>;

/// The runtime tag of an element type, 16-bit types included.
template <class T> inline constexpr DType dtype_v = dtype_of<T>;

}  // namespace shardalg::cuda

namespace shardalg {
template <> inline constexpr bool is_element_v<cuda::bf16> = true;
template <> inline constexpr bool is_element_v<cuda::f16> = true;
template <> inline constexpr DType dtype_of<cuda::bf16> = DType::bf16;
template <> inline constexpr DType dtype_of<cuda::f16> = DType::f16;
}  // namespace shardalg

namespace shardalg::cuda {

/// The type arithmetic on T runs in: float for the 16-bit types and float, else T itself.
template <class T> struct compute { using type = T; };
template <> struct compute<bf16> { using type = float; };
template <> struct compute<f16> { using type = float; };
template <class T> using compute_t = typename compute<T>::type;

/// The type sums over T accumulate in (column/row sums, norms, softmax denominators).
template <class T> struct accum { using type = float; };
template <> struct accum<double> { using type = double; };
template <> struct accum<std::int32_t> { using type = std::int64_t; };
template <> struct accum<std::int64_t> { using type = std::int64_t; };
template <class T> using accum_t = typename accum<T>::type;

/// T → its compute type and back (host and device; the 16-bit conversions round to nearest even).
template <class T>
SHARDALG_HD inline compute_t<T> to_compute(T x) {
  if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<T, f16>) return __half2float(x);
  else return x;
}
template <class T, class U>
SHARDALG_HD inline T from_compute(U x) {
  if constexpr (std::is_same_v<T, bf16>) return __float2bfloat16(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, f16>) return __float2half(static_cast<float>(x));
  else return static_cast<T>(x);
}

/// cuBLAS / CUDA library type tag of an element type.
template <class T> inline constexpr cudaDataType_t cuda_data_type = CUDA_R_32F;
template <> inline constexpr cudaDataType_t cuda_data_type<double> = CUDA_R_64F;
template <> inline constexpr cudaDataType_t cuda_data_type<bf16> = CUDA_R_16BF;
template <> inline constexpr cudaDataType_t cuda_data_type<f16> = CUDA_R_16F;
template <> inline constexpr cudaDataType_t cuda_data_type<std::int32_t> = CUDA_R_32I;
template <> inline constexpr cudaDataType_t cuda_data_type<std::int64_t> = CUDA_R_64I;

}  // namespace shardalg::cuda
