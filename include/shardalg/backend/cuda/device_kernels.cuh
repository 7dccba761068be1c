// shardalg/backend/cuda/device_kernels.cuh — the CUDA kernels of the backend policy (backend.hpp) and
// of the simulated world's ordered reduction (sim_comm.hpp); the layers' kernels are kernels.cuh.
//
// Conventions: row-major blocks; 16-bit storage computes in fp32 (to_compute / from_compute);
// sums accumulate in accum_t<T>; elementwise kernels use grid-stride loops of kThreads threads;
// row-wise kernels use one block per row and block reductions. Needs nvcc.
#pragma once

#if !defined(__CUDACC__)
#error "shardalg/backend/cuda/device_kernels.cuh needs the CUDA compiler: compile this translation unit as .cu"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda::kernels {

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements (0 when there is nothing to do).
inline unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, std::size_t{1} << 20));
}

#define SHARDALG_GRID_STRIDE(i, n)                                                                       \
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);         \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

/// (i, j) over a rows × cols block (row-major element i·cols + j) with no 64-bit division per
/// element: rows by blockIdx.y (stride gridDim.y), columns by the x dimension of the grid. Launch
/// with grid_rows_cols(rows, cols) and kThreads threads (rows, cols > 0).
#define SHARDALG_ROWS_COLS(i, j, rows, cols)                                                             \
  for (std::size_t i = blockIdx.y; i < (rows); i += gridDim.y)                                           \
    for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < (cols);    \
         j += static_cast<std::size_t>(gridDim.x) * blockDim.x)
inline dim3 grid_rows_cols(std::size_t rows, std::size_t cols) {
  const auto x = std::min<std::size_t>((cols + kThreads - 1) / kThreads, 64);
  const auto y = std::min<std::size_t>(rows, 65535);
  return {static_cast<unsigned>(std::max<std::size_t>(x, 1)), static_cast<unsigned>(std::max<std::size_t>(y, 1))};
}

// ---- reductions ------------------------------------------------------------------------------

template <class A>
__device__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A>
__device__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32); every thread gets the result. Safe to call
/// repeatedly in one kernel.
template <class A>
__device__ A block_sum(A v) {
  __shared__ A sh[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A r = lane < nw ? sh[lane] : A(0);
    r = warp_sum(r);
    if (lane == 0) sh[0] = r;
  }
  __syncthreads();
  return sh[0];
}
template <class A>
__device__ A block_max(A v, A lowest) {
  __shared__ A sh[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A r = lane < nw ? sh[lane] : lowest;
    r = warp_max(r);
    if (lane == 0) sh[0] = r;
  }
  __syncthreads();
  return sh[0];
}

template <class T>
using rowf_t = std::conditional_t<std::is_same_v<T, double>, double, float>;  // row-op arithmetic

// ---- the backend policy ----------------------------------------------------------------------

/// A functor that opted in (device_callable) and is generic over its argument, float → float
/// (e.g. nn's GeLU functors): on 16-bit storage map runs it in fp32 and rounds once, like every
/// other kernel here, instead of in 16-bit arithmetic.
template <class F>
concept GenericFloatFunctor = requires(const F& f) {
  requires static_cast<bool>(F::device_callable);
  { f(1.0f) } -> std::same_as<float>;
};

template <class T, class F>
__global__ void map(const T* __restrict__ x, T* __restrict__ y, std::size_t n, F f) {
  if constexpr (HalfElement<T> && GenericFloatFunctor<F>) {
    SHARDALG_GRID_STRIDE(i, n) y[i] = from_compute<T>(f(to_compute(x[i])));
  } else {
    SHARDALG_GRID_STRIDE(i, n) y[i] = f(x[i]);
  }
}
template <class T, class F>
__global__ void zip(const T* __restrict__ x, const T* __restrict__ z, T* __restrict__ y, std::size_t n, F f) {
  SHARDALG_GRID_STRIDE(i, n) y[i] = f(x[i], z[i]);
}

/// y = x + 1·b, b a row of C elements.
template <class T>
__global__ void add_row(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y, std::size_t rows,
                        std::size_t cols) {
  SHARDALG_ROWS_COLS(i, j, rows, cols) y[i * cols + j] = from_compute<T>(to_compute(x[i * cols + j]) + to_compute(b[j]));
}

// Column sums, out[j] = Σ_i v(i, j), in two passes (no atomics, so the same bits every run):
//   1. a grid of (column tiles of kColTile) × (row chunks): block (bx, by) sums the tile's
//      columns over rows by·kColRows + y, stepping gridDim.y·kColRows, its kColRows row lanes
//      combined in shared memory, into part[by, j] (accum_t);
//   2. out[j] = Σ_by part[by, j] in chunk order.
// A warp reads 32 consecutive elements of one row (coalesced); the row chunks give every SM
// work even for a [4096, 4096] block, which one thread per column (the first version: 16 blocks
// on 132 SMs, 3.7 ms of a 21 ms block step on an H200) did not. `v` is a loader: the element
// itself, or a product of two blocks (a norm's dγ = Σ dY ⊙ x̂) read in the same sweep.
constexpr int kColTile = 32, kColRows = 8;

template <class T>
struct LoadOne {
  const T* x;
  __device__ accum_t<T> operator()(std::size_t i) const { return static_cast<accum_t<T>>(to_compute(x[i])); }
};
template <class T>
struct LoadProduct {
  const T *x, *y;
  __device__ accum_t<T> operator()(std::size_t i) const {
    return static_cast<accum_t<T>>(to_compute(x[i])) * static_cast<accum_t<T>>(to_compute(y[i]));
  }
};

template <class A, class V>
__global__ void col_sum_partial(V v, A* __restrict__ part, std::size_t rows, std::size_t cols) {
  __shared__ A sh[kColRows][kColTile + 1];
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * kColTile + threadIdx.x;
  A s = 0;
  if (j < cols) {
    // Four rows in flight per step (independent loads; the sum order is fixed by the shape).
    const std::size_t step = static_cast<std::size_t>(gridDim.y) * kColRows;
    std::size_t i = static_cast<std::size_t>(blockIdx.y) * kColRows + threadIdx.y;
    A s1 = 0, s2 = 0, s3 = 0;
    for (; i + 3 * step < rows; i += 4 * step) {
      s += v(i * cols + j);
      s1 += v((i + step) * cols + j);
      s2 += v((i + 2 * step) * cols + j);
      s3 += v((i + 3 * step) * cols + j);
    }
    for (; i < rows; i += step) s += v(i * cols + j);
    s = (s + s1) + (s2 + s3);
  }
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    for (int y = 1; y < kColRows; ++y) s += sh[y][threadIdx.x];
    part[static_cast<std::size_t>(blockIdx.y) * cols + j] = s;
  }
}
template <class T, class A>
__global__ void col_sum_finish(const A* __restrict__ part, T* __restrict__ out, std::size_t chunks, std::size_t cols) {
  SHARDALG_GRID_STRIDE(j, cols) {
    A s = 0;
    for (std::size_t c = 0; c < chunks; ++c) s += part[c * cols + j];
    out[j] = from_compute<T>(s);
  }
}
/// Row chunks for a [rows, cols] column sum: ~2048 blocks in all, each row lane ≥ 16 rows.
inline unsigned col_sum_chunks(std::size_t rows, std::size_t cols) {
  const std::size_t tiles = (cols + kColTile - 1) / kColTile;
  const std::size_t by_rows = std::max<std::size_t>(1, rows / (16 * kColRows));
  const std::size_t by_grid = std::max<std::size_t>(1, 2048 / std::max<std::size_t>(tiles, 1));
  return static_cast<unsigned>(std::min<std::size_t>({by_rows, by_grid, 65535}));
}

/// out[i] = Σ_j x[i, j]: one block per row.
template <class T>
__global__ void row_sum(const T* __restrict__ x, T* __restrict__ out, std::size_t cols) {
  const T* row = x + blockIdx.x * cols;
  accum_t<T> s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) s += to_compute(row[j]);
  s = block_sum(s);
  if (threadIdx.x == 0) out[blockIdx.x] = from_compute<T>(s);
}

/// Effective element (i, j) of a MatView.
template <class T>
__device__ inline T view_at(const MatView<T>& v, Index i, Index j) {
  return v.trans ? v.data[j * v.ld + i] : v.data[i * v.ld + j];
}

/// C := α·op(A)·op(B) + β·C for integer types (cuBLAS has no integer GEMM with integer output):
/// one thread per output element, exact.
template <class T>
__global__ void gemm_naive(T alpha, MatView<T> a, MatView<T> b, T beta, T* __restrict__ c) {
  const std::size_t m = a.rows, n = b.cols;
  SHARDALG_GRID_STRIDE(idx, m * n) {
    const Index i = static_cast<Index>(idx / n), j = static_cast<Index>(idx % n);
    T s = 0;
    for (Index k = 0; k < a.cols; ++k) s += view_at(a, i, k) * view_at(b, k, j);
    c[idx] = beta == T(0) ? alpha * s : alpha * s + beta * c[idx];
  }
}

/// Row softmax, optionally scaled and causally masked: row i of the block is global row
/// row_off + i, column j is global column col_off + j, and (i, j) is masked when the global
/// column exceeds the global row. A fully masked row yields zeros.
template <class T>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, std::size_t cols, float scale, bool causal,
                             Index row_off, Index col_off) {
  using A = rowf_t<T>;
  const std::size_t i = blockIdx.x;
  const T* xr = x + i * cols;
  T* yr = y + i * cols;
  const Index gi = row_off + static_cast<Index>(i);
  auto masked = [&](std::size_t j) { return causal && col_off + static_cast<Index>(j) > gi; };
  const A lowest = -std::numeric_limits<A>::infinity();
  A m = lowest;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x)
    if (!masked(j)) {
      const A v = static_cast<A>(to_compute(xr[j])) * static_cast<A>(scale);
      m = v > m ? v : m;
    }
  m = block_max(m, lowest);
  A s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x)
    if (!masked(j)) s += exp(static_cast<A>(to_compute(xr[j])) * static_cast<A>(scale) - m);
  s = block_sum(s);
  const A inv = s > 0 ? A(1) / s : A(0);
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x)
    yr[j] = masked(j) ? from_compute<T>(0.0f)
                      : from_compute<T>(exp(static_cast<A>(to_compute(xr[j])) * static_cast<A>(scale) - m) * inv);
}

/// dx = scale · y ⊙ (dy − Σ_j dy·y) per row (the softmax backward; masked entries have y = 0).
// ---- simulated communicator: ordered reduction over ranks' buffers ---------------------------

constexpr int kMaxSimRanks = 64;
struct SrcList {
  const void* p[kMaxSimRanks];
};

/// dst[i] = src_0[i] ⊕ src_1[i] ⊕ … in rank order (dst may be one of the sources), computed in
/// accum_t<T> and rounded once, so every rank gets the same bits.
template <class T>
__global__ void reduce_ranks(T* dst, SrcList src, int nsrc, std::size_t n, int op /*0 sum, 1 max, 2 min*/) {
  SHARDALG_GRID_STRIDE(i, n) {
    auto v = to_compute(static_cast<const T*>(src.p[0])[i]);
    for (int s = 1; s < nsrc; ++s) {
      const auto w = to_compute(static_cast<const T*>(src.p[s])[i]);
      v = op == 0 ? static_cast<decltype(v)>(v + w) : op == 1 ? (w > v ? w : v) : (w < v ? w : v);
    }
    dst[i] = from_compute<T>(v);
  }
}

}  // namespace shardalg::cuda::kernels
