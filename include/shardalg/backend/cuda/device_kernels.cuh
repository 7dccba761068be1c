// shardalg/backend/cuda/device_kernels.cuh — the CUDA kernels of the backend and the layer operations.
//
// Conventions: row-major blocks; 16-bit storage computes in fp32 (to_compute / from_compute);
// sums accumulate in accum_t<T>; elementwise kernels use grid-stride loops of kThreads threads;
// row-wise kernels use one block per row and block reductions. Host wrappers live in
// backend.hpp (the backend policy) and ops.hpp (the layer operations). Needs nvcc.
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
#include "shardalg/backend/cuda/random.hpp"
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
  SHARDALG_GRID_STRIDE(i, rows * cols) y[i] = from_compute<T>(to_compute(x[i]) + to_compute(b[i % cols]));
}

/// out[j] = Σ_i x[i, j]: one thread per column, coalesced across the warp.
template <class T>
__global__ void col_sum(const T* __restrict__ x, T* __restrict__ out, std::size_t rows, std::size_t cols) {
  SHARDALG_GRID_STRIDE(j, cols) {
    accum_t<T> s = 0;
    for (std::size_t i = 0; i < rows; ++i) s += to_compute(x[i * cols + j]);
    out[j] = from_compute<T>(s);
  }
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
template <class T>
__global__ void softmax_rows_backward(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                      std::size_t cols, float scale) {
  using A = rowf_t<T>;
  const std::size_t off = blockIdx.x * cols;
  A s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x)
    s += static_cast<A>(to_compute(y[off + j])) * static_cast<A>(to_compute(dy[off + j]));
  s = block_sum(s);
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A yy = to_compute(y[off + j]), g = to_compute(dy[off + j]);
    dx[off + j] = from_compute<T>(static_cast<A>(scale) * yy * (g - s));
  }
}

// ---- activations -----------------------------------------------------------------------------

enum class Gelu { tanh, erf };

template <Gelu G>
__device__ inline float gelu_f(float x) {
  if constexpr (G == Gelu::tanh) {
    const float k = 0.7978845608028654f;  // √(2/π)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  } else {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  }
}
template <Gelu G>
__device__ inline float gelu_grad_f(float x) {
  if constexpr (G == Gelu::tanh) {
    const float k = 0.7978845608028654f;
    const float t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
  } else {
    return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * expf(-0.5f * x * x) * 0.3989422804014327f;
  }
}
template <class T, Gelu G>
__global__ void gelu(const T* __restrict__ x, T* __restrict__ y, std::size_t n) {
  SHARDALG_GRID_STRIDE(i, n) y[i] = from_compute<T>(gelu_f<G>(static_cast<float>(to_compute(x[i]))));
}
template <class T, Gelu G>
__global__ void gelu_backward(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, std::size_t n) {
  SHARDALG_GRID_STRIDE(i, n)
  dx[i] = from_compute<T>(static_cast<float>(to_compute(dy[i])) * gelu_grad_f<G>(static_cast<float>(to_compute(x[i]))));
}

__device__ inline float sigmoid_f(float a) { return 1.0f / (1.0f + expf(-a)); }

/// SwiGLU: y = silu(a) ⊙ b (a the gate projection, b the up projection; same layout).
template <class T>
__global__ void swiglu(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, std::size_t n) {
  SHARDALG_GRID_STRIDE(i, n) {
    const float av = to_compute(a[i]), bv = to_compute(b[i]);
    y[i] = from_compute<T>(av * sigmoid_f(av) * bv);
  }
}
template <class T>
__global__ void swiglu_backward(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ dy,
                                T* __restrict__ da, T* __restrict__ db, std::size_t n) {
  SHARDALG_GRID_STRIDE(i, n) {
    const float av = to_compute(a[i]), bv = to_compute(b[i]), g = to_compute(dy[i]);
    const float s = sigmoid_f(av);
    da[i] = from_compute<T>(g * bv * s * (1.0f + av * (1.0f - s)));
    db[i] = from_compute<T>(g * av * s);
  }
}

// ---- normalisation (whole rows per rank: layouts R and Row) ------------------------------------

/// LayerNorm forward; saves mean and rstd per row (fp32) for the backward. gamma/beta may be null.
template <class T>
__global__ void layernorm(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                          std::size_t cols, float eps) {
  const std::size_t off = blockIdx.x * cols;
  float s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) s += to_compute(x[off + j]);
  const float mean = block_sum(s) / static_cast<float>(cols);
  float v = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = static_cast<float>(to_compute(x[off + j])) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(block_sum(v) / static_cast<float>(cols) + eps);
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float h = (static_cast<float>(to_compute(x[off + j])) - mean) * rstd;
    if (gamma) h *= static_cast<float>(to_compute(gamma[j]));
    if (beta) h += static_cast<float>(to_compute(beta[j]));
    y[off + j] = from_compute<T>(h);
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

/// RMSNorm forward: y = x · rstd · gamma, rstd = 1/√(mean(x²) + eps); saves rstd.
template <class T>
__global__ void rmsnorm(const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ y,
                        float* __restrict__ rstd_out, std::size_t cols, float eps) {
  const std::size_t off = blockIdx.x * cols;
  float s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = to_compute(x[off + j]);
    s += v * v;
  }
  const float rstd = rsqrtf(block_sum(s) / static_cast<float>(cols) + eps);
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float h = static_cast<float>(to_compute(x[off + j])) * rstd;
    if (gamma) h *= static_cast<float>(to_compute(gamma[j]));
    y[off + j] = from_compute<T>(h);
  }
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

/// dx of LayerNorm (mean != null) or RMSNorm (mean == null), from the saved statistics:
///   x̂ = (x − μ)·r,  g = dy ⊙ γ,  dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂))   (RMSNorm: no mean(g) term).
template <class T>
__global__ void norm_backward_dx(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ dy,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 T* __restrict__ dx, std::size_t cols) {
  const std::size_t off = blockIdx.x * cols;
  const float mu = mean ? mean[blockIdx.x] : 0.0f, r = rstd[blockIdx.x];
  float sg = 0, sgx = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (static_cast<float>(to_compute(x[off + j])) - mu) * r;
    float g = to_compute(dy[off + j]);
    if (gamma) g *= static_cast<float>(to_compute(gamma[j]));
    sg += g;
    sgx += g * xh;
  }
  const float inv_c = 1.0f / static_cast<float>(cols);
  const float mg = mean ? block_sum(sg) * inv_c : 0.0f;
  const float mgx = block_sum(sgx) * inv_c;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (static_cast<float>(to_compute(x[off + j])) - mu) * r;
    float g = to_compute(dy[off + j]);
    if (gamma) g *= static_cast<float>(to_compute(gamma[j]));
    dx[off + j] = from_compute<T>(r * (g - mg - xh * mgx));
  }
}

/// dγ[j] = Σ_i dy·x̂ and dβ[j] = Σ_i dy (dβ may be null): one thread per column.
template <class T>
__global__ void norm_backward_params(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, T* __restrict__ dgamma, T* __restrict__ dbeta,
                                     std::size_t rows, std::size_t cols) {
  SHARDALG_GRID_STRIDE(j, cols) {
    float sg = 0, sb = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      const float xh = (static_cast<float>(to_compute(x[i * cols + j])) - (mean ? mean[i] : 0.0f)) * rstd[i];
      const float g = to_compute(dy[i * cols + j]);
      sg += g * xh;
      sb += g;
    }
    dgamma[j] = from_compute<T>(sg);
    if (dbeta) dbeta[j] = from_compute<T>(sb);
  }
}

// ---- dropout keyed by the global element index ----------------------------------------------

/// y = x·keep/(1−p) where keep = dropout_keep(seed, (row_off+i)·global_cols + col_off + j, p).
/// The backward is the same call on dy.
template <class T>
__global__ void dropout(const T* __restrict__ x, T* __restrict__ y, std::size_t rows, std::size_t cols,
                        Index row_off, Index col_off, Index global_cols, std::uint64_t seed, float p) {
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  SHARDALG_GRID_STRIDE(idx, rows * cols) {
    const auto i = static_cast<Index>(idx / cols), j = static_cast<Index>(idx % cols);
    const auto g = static_cast<std::uint64_t>((row_off + i) * global_cols + col_off + j);
    y[idx] = dropout_keep(seed, g, p) ? from_compute<T>(static_cast<float>(to_compute(x[idx])) * scale)
                                      : from_compute<T>(0.0f);
  }
}

// ---- vocab-parallel cross-entropy pieces ------------------------------------------------------
// logits[R, V/P] hold global vocabulary columns [v0, v0 + V/P); targets are global ids.

/// out[i] = max_j logits[i, j] (then all_reduce(max) over the group).
template <class T>
__global__ void ce_row_max(const T* __restrict__ logits, float* __restrict__ out, std::size_t cols) {
  const std::size_t off = blockIdx.x * cols;
  float m = -INFINITY;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, to_compute(logits[off + j]));
  m = block_max(m, -INFINITY);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

/// stats[i] = Σ_j exp(logits[i,j] − gmax[i]); stats[R + i] = logits[i, t_i − v0] if t_i is local,
/// else 0 (then all_reduce(sum) over the group: one reduction carries both).
template <class T>
__global__ void ce_local_stats(const T* __restrict__ logits, const float* __restrict__ gmax,
                               const std::int32_t* __restrict__ targets, float* __restrict__ stats, std::size_t rows,
                               std::size_t cols, Index v0) {
  const std::size_t i = blockIdx.x, off = i * cols;
  const float m = gmax[i];
  float s = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(static_cast<float>(to_compute(logits[off + j])) - m);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    stats[i] = s;
    const Index t = targets[i] - v0;
    stats[rows + i] = (t >= 0 && t < static_cast<Index>(cols)) ? static_cast<float>(to_compute(logits[off + t])) : 0.0f;
  }
}

/// loss[i] = log(Σ) + gmax − target logit.
template <class = void>
__global__ void ce_loss(const float* __restrict__ gmax, const float* __restrict__ stats, float* __restrict__ loss,
                               std::size_t rows) {
  SHARDALG_GRID_STRIDE(i, rows) loss[i] = logf(stats[i]) + gmax[i] - stats[rows + i];
}

/// dlogits[i, j] = scale · (softmax_ij − [v0 + j == t_i]).
template <class T>
__global__ void ce_backward(const T* __restrict__ logits, const float* __restrict__ gmax, const float* __restrict__ stats,
                            const std::int32_t* __restrict__ targets, T* __restrict__ dlogits, std::size_t rows,
                            std::size_t cols, Index v0, float scale) {
  SHARDALG_GRID_STRIDE(idx, rows * cols) {
    const std::size_t i = idx / cols, j = idx % cols;
    const float p = expf(static_cast<float>(to_compute(logits[idx])) - gmax[i]) / stats[i];
    const float hot = (v0 + static_cast<Index>(j) == targets[i]) ? 1.0f : 0.0f;
    dlogits[idx] = from_compute<T>(scale * (p - hot));
  }
}

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
