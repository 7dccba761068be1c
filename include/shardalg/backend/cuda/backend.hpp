// shardalg/backend/cuda/backend.hpp — CudaBackend: the core's backend policy (backend/cpu/backend.hpp) over
// device memory, so that Sharded<float, ColSharded, CudaBackend> runs the core's matmul, layout
// collectives and dense checks unchanged.
//
//   matrix<T>                DeviceMatrix<T> (row-major, cudaMalloc)
//   zeros / empty / copy_block / pack_col_blocks / unpack_col_blocks   cudaMemsetAsync / cudaMemcpy2DAsync
//   view(m, trans)           the core's MatView over the device pointer (no copy)
//   gemm(α, A, B, β, C)      cublasGemmEx with the row-major operand swap (below); fp32, fp64,
//                            bf16/fp16 storage with fp32 accumulation; integers: an exact kernel
//   map / zip                a kernel when the functor is device-callable, else a host round trip
//   col_sum / row_sum / add_row / softmax_rows   kernels (device_kernels.cuh; col_sum in two passes)
//
// Everything is ordered on current().stream() (context.hpp); nothing here synchronises except
// the host fallback of map/zip and downloads.
//
// Row-major GEMM with a column-major library: a row-major M×N block with leading dimension ld
// *is* the column-major N×M block Mᵀ with the same ld. So C = op(A)·op(B) (row-major) is
// Cᵀ = op(B)ᵀ·op(A)ᵀ (column-major): call cuBLAS with the operands swapped, m ↔ n, and the
// transpose flags taken from the views as they are. No operand is copied or transposed.
#pragma once

#if !defined(__CUDACC__)
#error "shardalg/backend/cuda/backend.hpp needs the CUDA compiler: compile this translation unit as .cu"
#endif

#include <cublas_v2.h>

#include <string_view>
#include <type_traits>
#include <vector>

#include "shardalg/backend/block_check.hpp"
#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/device_matrix.hpp"
#include "shardalg/backend/cuda/device_kernels.cuh"
#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda {

/// Whether a functor may be called in a kernel. Opt in with a member `static constexpr bool
/// device_callable = true;` on a functor whose operator() is __host__ __device__; nvcc's extended
/// __device__ / __host__ __device__ lambdas are recognised automatically. Anything else (e.g. the
/// plain lambdas of core/elementwise.hpp) takes the host round trip.
template <class F>
inline constexpr bool is_device_callable_v =
    requires { requires static_cast<bool>(std::remove_cvref_t<F>::device_callable); }
#if defined(__CUDACC_EXTENDED_LAMBDA__)
    || __nv_is_extended_device_lambda_closure_type(std::remove_cvref_t<F>) ||
    __nv_is_extended_host_device_lambda_closure_type(std::remove_cvref_t<F>)
#endif
    ;

namespace detail {
template <class T>
void copy_2d(T* dst, Index dpitch, const T* src, Index spitch, Index width, Index height) {
  if (width == 0 || height == 0) return;
  SHARDALG_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dpitch) * sizeof(T), src,
                                        static_cast<std::size_t>(spitch) * sizeof(T),
                                        static_cast<std::size_t>(width) * sizeof(T), static_cast<std::size_t>(height),
                                        cudaMemcpyDeviceToDevice, current_stream()));
}
/// x ↦ s·x in T's compute type (device-callable).
template <class T>
struct Scale {
  static constexpr bool device_callable = true;
  compute_t<T> s;
  SHARDALG_HD T operator()(T x) const { return from_compute<T>(s * to_compute(x)); }
};
inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) ::shardalg::cuda::detail::throw_cuda(e, what, __FILE__, __LINE__);
}
/// out[j] := Σ_i v(i·cols + j) for j < cols, rounded to T once: device_kernels.cuh's two passes,
/// the partial sums in a scratch block from the pool.
template <class T, class V>
void col_sum_into(T* out, std::size_t rows, std::size_t cols, V v) {
  using A = accum_t<T>;
  if (cols == 0) return;
  const unsigned chunks = kernels::col_sum_chunks(rows, cols);
  DeviceMatrix<A> part(chunks, static_cast<Index>(cols));
  const dim3 grid(static_cast<unsigned>((cols + kernels::kColTile - 1) / kernels::kColTile), chunks);
  const dim3 block(kernels::kColTile, kernels::kColRows);
  kernels::col_sum_partial<A><<<grid, block, 0, current_stream()>>>(v, part.data(), rows, cols);
  check_launch("col_sum_partial");
  kernels::col_sum_finish<<<kernels::blocks_for(cols), kernels::kThreads, 0, current_stream()>>>(part.data(), out,
                                                                                                  chunks, cols);
  check_launch("col_sum_finish");
}
}  // namespace detail

struct CudaBackend {
  static constexpr std::string_view name = "cuda";

  template <class T>
  using matrix = DeviceMatrix<T>;

  template <class T>
  static matrix<T> zeros(Index r, Index c) {
    return matrix<T>::zeros(r, c);
  }
  template <class T>
  static matrix<T> empty(Index r, Index c) {
    return matrix<T>(r, c);
  }

  template <class T>
  static matrix<T> copy_block(const matrix<T>& m, Index r0, Index c0, Index r, Index c) {
    shardalg::detail::check_block_inside("copy_block", r0, c0, r, c, m.rows(), m.cols());
    matrix<T> out(r, c);
    detail::copy_2d(out.data(), c, m.data() + r0 * m.cols() + c0, m.cols(), c, r);
    return out;
  }

  /// dst[r0:r0+src.rows, c0:c0+src.cols] := src (dst holds the rest).
  template <class T>
  static void paste_block(matrix<T>& dst, Index r0, Index c0, const matrix<T>& src) {
    shardalg::detail::check_block_inside("paste_block", r0, c0, src.rows(), src.cols(), dst.rows(), dst.cols());
    detail::copy_2d(dst.data() + r0 * dst.cols() + c0, dst.cols(), src.data(), src.cols(), src.cols(), src.rows());
  }

  template <class T>
  static MatView<T> view(const matrix<T>& m, bool trans = false) {
    return trans ? MatView<T>{m.data(), m.cols(), m.rows(), m.cols(), true}
                 : MatView<T>{m.data(), m.rows(), m.cols(), m.cols(), false};
  }

  /// C := α·op(A)·op(B) + β·C. S is T, or float for 16-bit T (the accumulation type).
  template <class T, class S>
  static void gemm(S alpha, MatView<T> a, MatView<T> b, S beta, matrix<T>& c) {
    const Index m = a.rows, k = a.cols, n = b.cols;
    if (b.rows != k || c.rows() != m || c.cols() != n)
      throw ShapeError(shardalg::detail::cat("CudaBackend::gemm: ", a.rows, "x", a.cols, " · ", b.rows, "x", b.cols,
                                             " into ", c.rows(), "x", c.cols()));
    if (m == 0 || n == 0) return;
    if (k == 0) {  // C := β·C without touching the (empty) operands
      const auto b = to_compute(static_cast<T>(beta));
      if (b == decltype(b)(0)) c.set_zero();
      else if (b != decltype(b)(1)) c = map(c, detail::Scale<T>{b});
      return;
    }
    if constexpr (std::is_integral_v<T>) {
      const std::size_t total = static_cast<std::size_t>(m * n);
      kernels::gemm_naive<T><<<kernels::blocks_for(total), kernels::kThreads, 0, current_stream()>>>(
          static_cast<T>(alpha), a, b, static_cast<T>(beta), c.data());
      detail::check_launch("gemm_naive");
    } else {
      using Scale = std::conditional_t<std::is_same_v<T, double>, double, float>;
      auto scale = [](auto v) {
        if constexpr (HalfElement<decltype(v)>) return static_cast<Scale>(to_compute(v));
        else return static_cast<Scale>(v);
      };
      gemm_ex(current(), scale(alpha), a, b, scale(beta), c.data(), n);
    }
  }

  /// The raw cuBLAS call behind gemm, on context `ctx`, output C row-major with leading
  /// dimension ldc. Exposed for benchmarks and for callers with their own strided output.
  template <class T, class Scale>
  static void gemm_ex(const Context& ctx, Scale alpha, MatView<T> a, MatView<T> b, Scale beta, T* c, Index ldc) {
    const Index m = a.rows, k = a.cols, n = b.cols;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if constexpr (std::is_same_v<T, double>) compute = CUBLAS_COMPUTE_64F;
    else if constexpr (std::is_same_v<T, float>)
      compute = ctx.fp32_math() == Fp32Math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    auto ld = [](Index x) { return static_cast<int>(x > 0 ? x : 1); };
    SHARDALG_CUBLAS_CHECK(cublasGemmEx(ctx.blas(), b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.data,
                                       cuda_data_type<T>, ld(b.ld), a.data, cuda_data_type<T>, ld(a.ld), &beta, c,
                                       cuda_data_type<T>, ld(ldc), compute, CUBLAS_GEMM_DEFAULT));
  }

  /// [rows, P·w] → P blocks [rows, w] stacked: block s is columns [s·w, (s+1)·w).
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, int p) {
    const Index w = x.cols() / p, r = x.rows();
    matrix<T> out(p * r, w);
    for (int s = 0; s < p; ++s) detail::copy_2d(out.data() + s * r * w, w, x.data() + s * w, x.cols(), w, r);
    return out;
  }
  /// The inverse: P stacked blocks [rows, w] → [rows, P·w].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& stacked, int p) {
    const Index r = stacked.rows() / p, w = stacked.cols();
    matrix<T> out(r, p * w);
    for (int s = 0; s < p; ++s) detail::copy_2d(out.data() + s * w, p * w, stacked.data() + s * r * w, w, w, r);
    return out;
  }

  /// Uneven column blocks: [rows, Σw] → the blocks [rows, w_s] one after another, flat [1, rows·Σw].
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, const std::vector<Index>& widths) {
    const Index r = x.rows();
    matrix<T> out(1, x.rows() * x.cols());
    Index c0 = 0, at = 0;
    for (const Index w : widths) {
      if (w > 0 && r > 0) detail::copy_2d(out.data() + at, w, x.data() + c0, x.cols(), w, r);
      c0 += w;
      at += r * w;
    }
    return out;
  }
  /// The inverse: the flat blocks [rows, w_s] one after another → [rows, Σw].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& flat, Index rows, const std::vector<Index>& widths) {
    Index total = 0;
    for (const Index w : widths) total += w;
    matrix<T> out(rows, total);
    Index c0 = 0, at = 0;
    for (const Index w : widths) {
      if (w > 0 && rows > 0) detail::copy_2d(out.data() + c0, total, flat.data() + at, w, w, rows);
      c0 += w;
      at += rows * w;
    }
    return out;
  }

  template <class T, class F>
  static matrix<T> map(const matrix<T>& x, F f) {
    matrix<T> y(x.rows(), x.cols());
    const auto n = static_cast<std::size_t>(x.size());
    if (n == 0) return y;
    if constexpr (is_device_callable_v<F>) {
      kernels::map<<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(x.data(), y.data(), n, f);
      detail::check_launch("map");
    } else {
      // Host round trip for host-only functors (slow; see docs/cuda.md, "core changes").
      std::vector<T> h(n);
      x.copy_to_host(h.data());
      for (auto& v : h) v = f(v);
      y.copy_from_host(h.data());
    }
    return y;
  }
  template <class T, class F>
  static matrix<T> zip(const matrix<T>& x, const matrix<T>& z, F f) {
    if (x.rows() != z.rows() || x.cols() != z.cols())
      throw ShapeError(shardalg::detail::cat("CudaBackend::zip: shapes differ: ", x.rows(), "x", x.cols(), " and ",
                                             z.rows(), "x", z.cols()));
    matrix<T> y(x.rows(), x.cols());
    const auto n = static_cast<std::size_t>(x.size());
    if (n == 0) return y;
    if constexpr (is_device_callable_v<F>) {
      kernels::zip<<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(x.data(), z.data(), y.data(), n, f);
      detail::check_launch("zip");
    } else {
      std::vector<T> hx(n), hz(n);
      x.copy_to_host(hx.data());
      z.copy_to_host(hz.data());
      for (std::size_t i = 0; i < n; ++i) hx[i] = f(hx[i], hz[i]);
      y.copy_from_host(hx.data());
    }
    return y;
  }

  /// [1, K]: Σ over rows.
  template <class T>
  static matrix<T> col_sum(const matrix<T>& x) {
    matrix<T> out(1, x.cols());
    detail::col_sum_into(out.data(), static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()),
                         kernels::LoadOne<T>{x.data()});
    return out;
  }
  /// [I, 1]: Σ over columns.
  template <class T>
  static matrix<T> row_sum(const matrix<T>& x) {
    matrix<T> out(x.rows(), 1);
    if (x.rows() == 0) return out;
    kernels::row_sum<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
        x.data(), out.data(), static_cast<std::size_t>(x.cols()));
    detail::check_launch("row_sum");
    return out;
  }
  /// x + 1·b for a row vector b[1, K].
  template <class T>
  static matrix<T> add_row(const matrix<T>& x, const matrix<T>& b) {
    if (b.rows() != 1 || b.cols() != x.cols())
      throw ShapeError(shardalg::detail::cat("CudaBackend::add_row: bias ", b.rows(), "x", b.cols(), " for ", x.rows(),
                                             "x", x.cols()));
    matrix<T> y(x.rows(), x.cols());
    const auto n = static_cast<std::size_t>(x.size());
    if (n == 0) return y;
    kernels::add_row<<<kernels::grid_rows_cols(static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())),
                       kernels::kThreads, 0, current_stream()>>>(
        x.data(), b.data(), y.data(), static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()));
    detail::check_launch("add_row");
    return y;
  }
  /// Numerically stable softmax over each row.
  template <class T>
  static matrix<T> softmax_rows(const matrix<T>& x) {
    matrix<T> y(x.rows(), x.cols());
    if (x.size() == 0) return y;
    kernels::softmax_rows<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
        x.data(), y.data(), static_cast<std::size_t>(x.cols()), 1.0f, false, 0, 0);
    detail::check_launch("softmax_rows");
    return y;
  }

  // ---- beyond the core's policy: transfers ----------------------------------------------------
  template <class T>
  static HostMatrix<T> to_host(const matrix<T>& m) {
    return m.host();
  }
  template <CudaElement T, class Derived>
  static matrix<T> to_device(const Eigen::MatrixBase<Derived>& h) {
    return matrix<T>(h);
  }
};

}  // namespace shardalg::cuda
