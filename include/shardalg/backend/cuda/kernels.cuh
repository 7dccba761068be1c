// shardalg/backend/cuda/kernels.cuh — nn::Kernels<CudaBackend>: the layers' local kernels
// (backend/cpu/kernels.hpp) on device blocks, so nn::Mlp<T, CudaBackend>, nn::Attention<T, CudaBackend>,
// nn::LayerNorm<T, CudaBackend>, nn::TransformerBlock<T, CudaBackend>, … run unchanged on the GPU.
//
// The semantics are those of Kernels<CpuBackend>, function by function (same arguments, same
// shapes, same roles of the returned blocks). Element types: float, double and the 16-bit
// storage types; arithmetic runs in acc_t<T> (float for float/bf16/fp16, double for double) and
// each stored result is rounded to T once. The returned statistics (mean/var, rstd, the row
// sums) are T blocks, as the layers store them (nn/layers/norm.hpp keeps `matrix<T>` in its caches).
//
//   generate, place                       host fill + upload; cudaMemcpy2DAsync
//   row_mean_var, row_power_sums,         one block per row, block reductions in acc_t<T>
//   norm_grad_sums
//   mean_var_from_sums, norm_apply,       elementwise kernels
//   norm_grad_apply, swiglu(_grad)
//   dropout                               nn::dropout_uniform — the *same* constexpr Philox4x32-10
//                                         function as the CPU (backend/random.hpp), called in device
//                                         code (shardalg::cuda compiles .cu with
//                                         --expt-relaxed-constexpr), so the mask is the CPU's bit
//                                         for bit
//   causal_attention(_grad)               cuBLAS strided-batched GEMMs + a causal softmax kernel
//                                         (the probabilities materialised: the reference path)
//   flash_attention(_grad)                with shardalg::cudnn linked (SHARDALG_WITH_CUDNN): cuDNN's
//                                         fused attention, no [s, s] block (cudnn_attention.hpp);
//                                         the layer takes it when flash_supported says so
//
// Attention on a local fused-QKV block [tokens, U·(Q + 2)·d] (U units of Q query heads, one K,
// one V head, each d wide; rows batch-major). For a fixed sequence b and query slot j, the U
// units sit at a constant column stride (the unit width), so one strided-batched GEMM covers
// all units; the host loops over b and j only:
//
//   S_u   = (1/√d)·Q_uj · K_uᵀ          [n, n], acc_t<T> scratch (bf16: scores kept in fp32)
//   P_uj  = causal_softmax(S_u)         rows i keep columns 0…i; stored in probs (T)
//   O_uj  = P_uj · V_u                  written into out[:, (u·Q + j)·d …] (T)
//
// Backward, with dQKV accumulated in acc_t<T> and rounded to T once at the end (K and V
// gradients sum over the Q query heads of their unit):
//
//   dV_u += P_ujᵀ · dO_uj    dP = dO_uj · V_uᵀ    dS = P ⊙ (dP − rowsum(dP ⊙ P))
//   dQ_uj = (1/√d)·dS · K_u  dK_u += (1/√d)·dSᵀ · Q_uj
//
// Row-major GEMMs through the column-major library by the operand swap, as in backend.hpp.
// Needs nvcc.
#pragma once

#if !defined(__CUDACC__)
#error "shardalg/backend/cuda/kernels.cuh needs the CUDA compiler: compile this translation unit as .cu"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "shardalg/backend/cuda/backend.hpp"
#if defined(SHARDALG_WITH_CUDNN)
#include <cstdlib>
#include <string>
#include <string_view>

#include "shardalg/backend/cuda/cudnn_attention.hpp"
#endif
#include "shardalg/backend/cuda/device_kernels.cuh"
#include "shardalg/backend/kernels.hpp"
#include "shardalg/backend/random.hpp"

namespace shardalg::cuda {

/// The arithmetic type of the layer kernels on T: float for float and the 16-bit types, double for double.
template <class T>
using acc_t = kernels::rowf_t<T>;

namespace nn_kernels {

using kernels::block_sum;
using kernels::kThreads;

template <class T>
__device__ inline acc_t<T> ld(const T* p, std::size_t i) {
  return static_cast<acc_t<T>>(to_compute(p[i]));
}

// ---- normalisation ------------------------------------------------------------------------------

/// mv[i] = (mean, variance) of row i, two passes; RMSNorm (center = false): (0, mean square).
template <class T>
__global__ void row_mean_var(const T* __restrict__ x, T* __restrict__ mv, std::size_t cols, bool center) {
  using A = acc_t<T>;
  const T* xr = x + blockIdx.x * cols;
  A mean = 0;
  if (center) {
    A s = 0;
    for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) s += ld(xr, j);
    mean = block_sum(s) / static_cast<A>(cols);
  }
  A v = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A d = ld(xr, j) - mean;
    v += d * d;
  }
  v = block_sum(v) / static_cast<A>(cols);
  if (threadIdx.x == 0) {
    mv[2 * blockIdx.x] = from_compute<T>(mean);
    mv[2 * blockIdx.x + 1] = from_compute<T>(v);
  }
}

/// s[i] = (Σ_k x_ik, Σ_k x_ik²) over the block's columns.
template <class T>
__global__ void row_power_sums(const T* __restrict__ x, T* __restrict__ s, std::size_t cols) {
  using A = acc_t<T>;
  const T* xr = x + blockIdx.x * cols;
  A s1 = 0, s2 = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A v = ld(xr, j);
    s1 += v;
    s2 += v * v;
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    s[2 * blockIdx.x] = from_compute<T>(s1);
    s[2 * blockIdx.x + 1] = from_compute<T>(s2);
  }
}

/// (Σx, Σx²) over n columns → (mean, Σx²/n − mean²); RMSNorm: (0, Σx²/n).
template <class T>
__global__ void mean_var_from_sums(const T* __restrict__ s, T* __restrict__ mv, std::size_t rows, Index n, bool center) {
  using A = acc_t<T>;
  SHARDALG_GRID_STRIDE(i, rows) {
    const A mean = center ? ld(s, 2 * i) / static_cast<A>(n) : A(0);
    mv[2 * i] = from_compute<T>(mean);
    mv[2 * i + 1] = from_compute<T>(ld(s, 2 * i + 1) / static_cast<A>(n) - mean * mean);
  }
}

/// x̂ = (x − mean)·rstd, rstd = 1/√(var + eps), y = x̂ ⊙ γ (+ β); rstd[i] written once per row.
template <class T>
__global__ void norm_apply(const T* __restrict__ x, const T* __restrict__ mv, const T* __restrict__ gamma,
                           const T* __restrict__ beta, T* __restrict__ y, T* __restrict__ xhat, T* __restrict__ rstd_out,
                           std::size_t rows, std::size_t cols, T eps) {
  using A = acc_t<T>;
  SHARDALG_ROWS_COLS(i, j, rows, cols) {
    const std::size_t idx = i * cols + j;
    const A rstd = A(1) / sqrt(ld(mv, 2 * i + 1) + static_cast<A>(to_compute(eps)));
    const A xh = (ld(x, idx) - ld(mv, 2 * i)) * rstd;
    A out = xh * ld(gamma, j);
    if (beta) out += ld(beta, j);
    xhat[idx] = from_compute<T>(xh);
    y[idx] = from_compute<T>(out);
    if (j == 0) rstd_out[i] = from_compute<T>(rstd);
  }
}

/// s[i] = (Σ_k g_ik, Σ_k g_ik·x̂_ik), g = dy ⊙ γ, over the block's columns.
template <class T>
__global__ void norm_grad_sums(const T* __restrict__ dy, const T* __restrict__ xhat, const T* __restrict__ gamma,
                               T* __restrict__ s, std::size_t cols) {
  using A = acc_t<T>;
  const std::size_t off = blockIdx.x * cols;
  A sg = 0, sgx = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = ld(dy, off + j) * ld(gamma, j);
    sg += g;
    sgx += g * ld(xhat, off + j);
  }
  sg = block_sum(sg);
  sgx = block_sum(sgx);
  if (threadIdx.x == 0) {
    s[2 * blockIdx.x] = from_compute<T>(sg);
    s[2 * blockIdx.x + 1] = from_compute<T>(sgx);
  }
}

/// dx = rstd·(g − Σg/n − x̂·Σ(g·x̂)/n), g = dy ⊙ γ; RMSNorm drops the Σg/n term.
template <class T>
__global__ void norm_grad_apply(const T* __restrict__ dy, const T* __restrict__ xhat, const T* __restrict__ gamma,
                                const T* __restrict__ rstd, const T* __restrict__ sums, T* __restrict__ dx,
                                std::size_t rows, std::size_t cols, Index n, bool center) {
  using A = acc_t<T>;
  SHARDALG_ROWS_COLS(i, j, rows, cols) {
    const std::size_t idx = i * cols + j;
    const A mg = center ? ld(sums, 2 * i) / static_cast<A>(n) : A(0);
    const A mgx = ld(sums, 2 * i + 1) / static_cast<A>(n);
    dx[idx] = from_compute<T>((ld(dy, idx) * ld(gamma, j) - mg - ld(xhat, idx) * mgx) * ld(rstd, i));
  }
}

// ---- SwiGLU on a [rows, 2w] block [gate | up] -----------------------------------------------------

template <class T>
__global__ void swiglu(const T* __restrict__ h, T* __restrict__ a, std::size_t rows, std::size_t w) {
  using A = acc_t<T>;
  SHARDALG_GRID_STRIDE(idx, rows * w) {
    const std::size_t i = idx / w, j = idx % w;
    const A g = ld(h, i * 2 * w + j), u = ld(h, i * 2 * w + w + j);
    a[idx] = from_compute<T>(g / (A(1) + exp(-g)) * u);
  }
}

/// d up = dA·silu(g); d gate = dA·up·σ(g)·(1 + g·(1 − σ(g))).
template <class T>
__global__ void swiglu_grad(const T* __restrict__ h, const T* __restrict__ da, T* __restrict__ dh, std::size_t rows,
                            std::size_t w) {
  using A = acc_t<T>;
  SHARDALG_GRID_STRIDE(idx, rows * w) {
    const std::size_t i = idx / w, j = idx % w;
    const A g = ld(h, i * 2 * w + j), u = ld(h, i * 2 * w + w + j), d = ld(da, idx);
    const A sig = A(1) / (A(1) + exp(-g));
    dh[i * 2 * w + w + j] = from_compute<T>(d * g * sig);
    dh[i * 2 * w + j] = from_compute<T>(d * u * sig * (A(1) + g * (A(1) - sig)));
  }
}

// ---- dropout keyed by the global index -------------------------------------------------------------

/// The column quads (4q … 4q + 3) that a block of cols > 0 columns starting at global column c0
/// touches (constexpr: host and device code alike).
constexpr std::size_t dropout_quad_count(std::size_t cols, Index c0) {
  return static_cast<std::size_t>(((c0 + static_cast<Index>(cols) - 1) >> 2) - (c0 >> 2) + 1);
}

/// Visits the elements of a rows × cols block at global offset (r0, c0) by dropout quads: one
/// thread per (row, global column quad q), one Philox4x32-10 block for the quad's four columns
/// 4q … 4q + 3 (nn::dropout_uniform's definition: word k is column 4q + k), f(local row, local
/// column, keep) for those of them inside the block. keep = [dropout_uniform(…) ≥ p], the CPU's mask bit
/// for bit. Launch with dropout_grid(rows, cols, c0) (rows, cols > 0).
template <class F>
__device__ inline void for_dropout_quads(std::size_t rows, std::size_t cols, Index r0, Index c0, double p,
                                         std::uint64_t seed, std::uint64_t tensor, F f) {
  const Index q0 = c0 >> 2, c1 = c0 + static_cast<Index>(cols);
  const std::size_t nq = dropout_quad_count(cols, c0);
  for (std::size_t i = blockIdx.y; i < rows; i += gridDim.y)
    for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < nq;
         t += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
      const Index q = q0 + static_cast<Index>(t);
      const auto w = nn::index_bits(seed, tensor, r0 + static_cast<Index>(i), q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const Index gc = 4 * q + k;
        if (gc >= c0 && gc < c1) f(i, static_cast<std::size_t>(gc - c0), static_cast<double>(w[k]) * 0x1.0p-32 >= p);
      }
    }
}
/// The grid for_dropout_quads runs on: rows × the block's column quads.
inline dim3 dropout_grid(std::size_t rows, std::size_t cols, Index c0) {
  return kernels::grid_rows_cols(rows, dropout_quad_count(cols, c0));
}

/// y = x ⊙ mask · scale, mask(i, j) = [dropout_uniform(seed, tensor, r0 + i, c0 + j) ≥ p]
/// (for_dropout_quads: nn::dropout_uniform's own Philox, hence the CPU's mask bit for bit).
template <class T>
__global__ void dropout(const T* __restrict__ x, T* __restrict__ y, std::size_t rows, std::size_t cols, double p,
                        acc_t<T> scale, std::uint64_t seed, std::uint64_t tensor, Index r0, Index c0) {
  for_dropout_quads(rows, cols, r0, c0, p, seed, tensor, [&](std::size_t i, std::size_t j, bool keep) {
    const std::size_t idx = i * cols + j;
    y[idx] = keep ? from_compute<T>(ld(x, idx) * scale) : from_compute<T>(acc_t<T>(0));
  });
}

// ---- attention ------------------------------------------------------------------------------------

/// Causal softmax of U stacked [n, n] score blocks (block u = rows u·n …): row i of a block keeps
/// columns 0…i. Output row (u, i) goes to p + u·p_stride + i·n; masked entries are 0.
/// One block per row; the kept scores are read from memory once, into shared memory (the launcher
/// gives n·sizeof(A) bytes), for the max, the exponentials and the sum; the masked half is never
/// read. Each thread reads back only the entries it wrote (the same c = threadIdx.x + k·blockDim.x).
template <class T, class A>
__global__ void causal_softmax_blocks(const A* __restrict__ s, T* __restrict__ p, Index n, Index p_stride) {
  extern __shared__ unsigned char smem_raw[];
  A* e = reinterpret_cast<A*>(smem_raw);
  const Index r = blockIdx.x, u = r / n, i = r % n;
  const A* sr = s + r * n;
  T* pr = p + u * p_stride + i * n;
  A m = -INFINITY;
  for (Index c = threadIdx.x; c <= i; c += blockDim.x) {
    e[c] = sr[c];
    m = e[c] > m ? e[c] : m;
  }
  m = kernels::block_max(m, A(-INFINITY));  // its barriers also order the stores to e
  A sum = 0;
  for (Index c = threadIdx.x; c <= i; c += blockDim.x) {
    e[c] = exp(e[c] - m);
    sum += e[c];
  }
  sum = block_sum(sum);
  for (Index c = threadIdx.x; c < n; c += blockDim.x) pr[c] = from_compute<T>(c <= i ? e[c] / sum : A(0));
}

/// dS = P ⊙ (dP − rowsum(dP ⊙ P)) for U stacked blocks; P row (u, i) at p + u·p_stride + i·n,
/// dP and dS stacked contiguously like the scores. P is causal (zero past the diagonal, so dS is
/// too): only columns 0…i are read, once, the products kept in shared memory (n·sizeof(A) bytes).
template <class T, class A>
__global__ void softmax_grad_blocks(const T* __restrict__ p, const A* __restrict__ dp, T* __restrict__ ds, Index n,
                                    Index p_stride) {
  extern __shared__ unsigned char smem_raw[];
  A* pv = reinterpret_cast<A*>(smem_raw);
  const Index r = blockIdx.x, u = r / n, i = r % n;
  const T* pr = p + u * p_stride + i * n;
  const A* dpr = dp + r * n;
  A dot = 0;
  for (Index c = threadIdx.x; c <= i; c += blockDim.x) {
    const A pc = ld(pr, c), g = dpr[c];
    pv[c] = pc;
    dot += g * pc;
  }
  dot = block_sum(dot);
  for (Index c = threadIdx.x; c < n; c += blockDim.x)
    ds[r * n + c] = from_compute<T>(c <= i ? pv[c] * (dpr[c] - dot) : A(0));
}

template <class T, class A>
__global__ void convert(const A* __restrict__ x, T* __restrict__ y, std::size_t n) {
  SHARDALG_GRID_STRIDE(i, n) y[i] = from_compute<T>(x[i]);
}

/// One operand of a strided batch: a row-major view (the core's MatView: effective shape, leading
/// dimension, transposed flag) and the element distance between consecutive batch members.
template <class T>
struct Batched {
  MatView<T> v;
  long long stride;
};

/// C_k := α·op(A_k)·op(B_k) + β·C_k for k < count; C row-major with leading dimension ldc, element
/// type C (T, or acc_t<T> to keep a product in fp32), batch stride c_stride.
template <class T, class C>
void gemm_batched(acc_t<T> alpha, Batched<T> a, Batched<T> b, acc_t<T> beta, C* c, Index ldc, long long c_stride,
                  int count) {
  const Index m = a.v.rows, k = a.v.cols, n = b.v.cols;
  if (m == 0 || n == 0 || count == 0) return;
  const Context& ctx = current();
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if constexpr (std::is_same_v<T, double>) compute = CUBLAS_COMPUTE_64F;
  else if constexpr (std::is_same_v<T, float>)
    compute = ctx.fp32_math() == Fp32Math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  auto ld = [](Index x) { return static_cast<int>(x > 0 ? x : 1); };
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: operands swapped, m ↔ n.
  SHARDALG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.blas(), b.v.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.v.trans ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b.v.data, cuda_data_type<T>, ld(b.v.ld), b.stride, a.v.data,
      cuda_data_type<T>, ld(a.v.ld), a.stride, &beta, c, cuda_data_type<C>, ld(ldc), c_stride, count, compute,
      CUBLAS_GEMM_DEFAULT));
}

inline unsigned grid(std::size_t n) { return kernels::blocks_for(n); }
inline std::size_t sz(Index n) { return static_cast<std::size_t>(n); }

}  // namespace nn_kernels
}  // namespace shardalg::cuda

namespace shardalg::nn {

template <>
struct Kernels<cuda::CudaBackend> {
  template <class T>
  using M = cuda::DeviceMatrix<T>;

  /// Fill on the host from f(local row, local col), then upload (f is host code: init, loading).
  template <class T, class F>
  static M<T> generate(Index r, Index c, F f) {
    std::vector<T> h(static_cast<std::size_t>(r * c));
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < c; ++j) h[static_cast<std::size_t>(i * c + j)] = f(i, j);
    M<T> m(r, c);
    if (m.size()) m.copy_from_host(h.data());
    return m;
  }

  /// dst[r0 : r0 + src.rows, c0 : c0 + src.cols] := src.
  template <class T>
  static void place(M<T>& dst, Index r0, Index c0, const M<T>& src) {
    if (r0 < 0 || c0 < 0 || r0 + src.rows() > dst.rows() || c0 + src.cols() > dst.cols())
      throw ShapeError(shardalg::detail::cat("Kernels<cuda>::place: ", src.rows(), "x", src.cols(), " at (", r0, ", ",
                                             c0, ") is outside a ", dst.rows(), "x", dst.cols(), " matrix"));
    cuda::detail::copy_2d(dst.data() + r0 * dst.cols() + c0, dst.cols(), src.data(), src.cols(), src.cols(), src.rows());
  }

  // ---- normalisation: center = true is LayerNorm, false is RMSNorm --------------------------

  template <class T>
  static M<T> row_mean_var(const M<T>& x, bool center) {
    M<T> mv(x.rows(), 2);
    if (x.rows() > 0) launch_rows(x.rows(), "row_mean_var", [&](unsigned g, cudaStream_t s) {
        cuda::nn_kernels::row_mean_var<<<g, cuda::kernels::kThreads, 0, s>>>(x.data(), mv.data(), sz(x.cols()), center);
      });
    return mv;
  }

  template <class T>
  static M<T> row_power_sums(const M<T>& x) {
    M<T> s(x.rows(), 2);
    if (x.rows() > 0) launch_rows(x.rows(), "row_power_sums", [&](unsigned g, cudaStream_t st) {
        cuda::nn_kernels::row_power_sums<<<g, cuda::kernels::kThreads, 0, st>>>(x.data(), s.data(), sz(x.cols()));
      });
    return s;
  }

  template <class T>
  static M<T> mean_var_from_sums(const M<T>& s, Index n, bool center) {
    M<T> mv(s.rows(), 2);
    if (s.rows() > 0) launch_flat(sz(s.rows()), "mean_var_from_sums", [&](unsigned g, cudaStream_t st) {
        cuda::nn_kernels::mean_var_from_sums<<<g, cuda::kernels::kThreads, 0, st>>>(s.data(), mv.data(), sz(s.rows()), n,
                                                                                   center);
      });
    return mv;
  }

  template <class T>
  struct NormOut {
    M<T> y, xhat, rstd;  // rstd: [rows, 1]
  };

  template <class T>
  static NormOut<T> norm_apply(const M<T>& x, const M<T>& mv, const M<T>& gamma, const M<T>* beta, T eps) {
    NormOut<T> o{M<T>(x.rows(), x.cols()), M<T>(x.rows(), x.cols()), M<T>(x.rows(), 1)};
    if (x.size() > 0) launch_grid(x, "norm_apply", [&](dim3 g, cudaStream_t s) {
        cuda::nn_kernels::norm_apply<<<g, cuda::kernels::kThreads, 0, s>>>(
            x.data(), mv.data(), gamma.data(), beta ? beta->data() : nullptr, o.y.data(), o.xhat.data(), o.rstd.data(),
            sz(x.rows()), sz(x.cols()), eps);
      });
    return o;
  }

  template <class T>
  static M<T> norm_grad_sums(const M<T>& dy, const M<T>& xhat, const M<T>& gamma) {
    M<T> s(dy.rows(), 2);
    if (dy.rows() > 0) launch_rows(dy.rows(), "norm_grad_sums", [&](unsigned g, cudaStream_t st) {
        cuda::nn_kernels::norm_grad_sums<<<g, cuda::kernels::kThreads, 0, st>>>(dy.data(), xhat.data(), gamma.data(),
                                                                               s.data(), sz(dy.cols()));
      });
    return s;
  }

  template <class T>
  static M<T> norm_grad_apply(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd, const M<T>& sums,
                              Index n, bool center) {
    M<T> dx(dy.rows(), dy.cols());
    if (dy.size() > 0) launch_grid(dy, "norm_grad_apply", [&](dim3 g, cudaStream_t s) {
        cuda::nn_kernels::norm_grad_apply<<<g, cuda::kernels::kThreads, 0, s>>>(
            dy.data(), xhat.data(), gamma.data(), rstd.data(), sums.data(), dx.data(), sz(dy.rows()), sz(dy.cols()), n,
            center);
      });
    return dx;
  }

  // ---- SwiGLU: a [rows, 2w] block [gate | up] → silu(gate) ⊙ up, [rows, w] --------------------

  template <class T>
  static M<T> swiglu(const M<T>& h) {
    const Index w = h.cols() / 2;
    M<T> a(h.rows(), w);
    if (a.size() > 0) launch_flat(sz(a.size()), "swiglu", [&](unsigned g, cudaStream_t s) {
        cuda::nn_kernels::swiglu<<<g, cuda::kernels::kThreads, 0, s>>>(h.data(), a.data(), sz(h.rows()), sz(w));
      });
    return a;
  }

  template <class T>
  static M<T> swiglu_grad(const M<T>& h, const M<T>& da) {
    const Index w = h.cols() / 2;
    M<T> dh(h.rows(), h.cols());
    if (da.size() > 0) launch_flat(sz(da.size()), "swiglu_grad", [&](unsigned g, cudaStream_t s) {
        cuda::nn_kernels::swiglu_grad<<<g, cuda::kernels::kThreads, 0, s>>>(h.data(), da.data(), dh.data(), sz(h.rows()),
                                                                           sz(w));
      });
    return dh;
  }

  // ---- dropout keyed by the global index -------------------------------------------------------

  template <class T>
  static M<T> dropout(const M<T>& x, double p, std::uint64_t seed, std::uint64_t tensor, Index r0, Index c0) {
    const auto scale = static_cast<cuda::acc_t<T>>(1.0 / (1.0 - p));  // the CPU's T(1/(1 − p)) for float/double
    M<T> y(x.rows(), x.cols());
    if (x.size() > 0) launch_dropout(x, c0, "dropout", [&](dim3 g, cudaStream_t s) {
        cuda::nn_kernels::dropout<<<g, cuda::kernels::kThreads, 0, s>>>(x.data(), y.data(), sz(x.rows()), sz(x.cols()),
                                                                       p, scale, seed, tensor, r0, c0);
      });
    return y;
  }

  // ---- causal self-attention on a local fused-QKV block ----------------------------------------

  template <class T>
  struct AttnOut {
    M<T> out;    // [tokens, units·q_per_unit·head_dim]: the heads side by side
    M<T> probs;  // [(batch·units·q_per_unit)·seq, seq]: softmax(QKᵀ/√d) per (batch, head)
  };

  template <class T>
  static AttnOut<T> causal_attention(const M<T>& qkv, const AttnShape& s) {
    using A = cuda::acc_t<T>;
    using cuda::nn_kernels::Batched;
    const Index n = s.seq, d = s.head_dim, U = s.units, Q = s.q_per_unit, uw = s.unit_width(), ld = qkv.cols(),
                ow = s.out_width();
    AttnOut<T> o{M<T>(s.batch * n, ow), M<T>(s.batch * U * Q * n, n)};
    if (o.out.size() == 0) return o;
    M<A> scores(U * n, n);  // for one (b, j): the U units' scaled Q·Kᵀ, stacked
    const A scale = A(1) / std::sqrt(A(d));
    const T* base = qkv.data();
    for (Index b = 0; b < s.batch; ++b)
      for (Index j = 0; j < Q; ++j) {
        const T* q = base + b * n * ld + j * d;
        const T* k = base + b * n * ld + Q * d;
        const T* v = k + d;
        T* p = o.probs.data() + (b * U * Q + j) * n * n;  // P_uj for u = 0, at stride Q·n·n
        cuda::nn_kernels::gemm_batched<T, A>(scale, Batched<T>{{q, n, d, ld, false}, uw},
                                             Batched<T>{{k, d, n, ld, true}, uw}, A(0), scores.data(), n, n * n,
                                             static_cast<int>(U));
        cuda::nn_kernels::causal_softmax_blocks<<<static_cast<unsigned>(U * n), cuda::kernels::kThreads,
                                                  row_smem<T, A>(n), cuda::current_stream()>>>(scores.data(), p, n,
                                                                                             Q * n * n);
        cuda::detail::check_launch("causal_softmax_blocks");
        cuda::nn_kernels::gemm_batched<T, T>(A(1), Batched<T>{{p, n, n, n, false}, Q * n * n},
                                             Batched<T>{{v, n, d, ld, false}, uw}, A(0),
                                             o.out.data() + b * n * ow + j * d, ow, Q * d, static_cast<int>(U));
      }
    return o;
  }

  template <class T>
  static M<T> causal_attention_grad(const M<T>& qkv, const M<T>& probs, const M<T>& dout, const AttnShape& s) {
    using A = cuda::acc_t<T>;
    using cuda::nn_kernels::Batched;
    const Index n = s.seq, d = s.head_dim, U = s.units, Q = s.q_per_unit, uw = s.unit_width(), ld = qkv.cols(),
                ow = s.out_width();
    M<A> acc = M<A>::zeros(qkv.rows(), qkv.cols());  // dQKV in acc_t<T>, rounded to T once at the end
    if (acc.size() == 0) return M<T>(qkv.rows(), qkv.cols());
    M<A> dp(U * n, n);  // for one (b, j), stacked over the units like the scores
    M<T> ds(U * n, n);
    const A scale = A(1) / std::sqrt(A(d));
    for (Index b = 0; b < s.batch; ++b)
      for (Index j = 0; j < Q; ++j) {
        const Index row0 = b * n * ld;
        const T* q = qkv.data() + row0 + j * d;
        const T* k = qkv.data() + row0 + Q * d;
        const T* v = k + d;
        const T* p = probs.data() + (b * U * Q + j) * n * n;
        const T* dO = dout.data() + b * n * ow + j * d;
        A* dq = acc.data() + row0 + j * d;
        A* dk = acc.data() + row0 + Q * d;
        A* dv = dk + d;
        const Batched<T> Pt{{p, n, n, n, true}, Q * n * n};
        const Batched<T> dOv{{dO, n, d, ow, false}, Q * d};
        const Batched<T> S{{ds.data(), n, n, n, false}, n * n}, St{{ds.data(), n, n, n, true}, n * n};
        const int count = static_cast<int>(U);
        using cuda::nn_kernels::gemm_batched;
        gemm_batched<T, A>(A(1), Pt, dOv, A(1), dv, ld, uw, count);                                   // dV += Pᵀ·dO
        gemm_batched<T, A>(A(1), dOv, Batched<T>{{v, d, n, ld, true}, uw}, A(0), dp.data(), n, n * n, count);  // dP = dO·Vᵀ
        cuda::nn_kernels::softmax_grad_blocks<<<static_cast<unsigned>(U * n), cuda::kernels::kThreads,
                                                row_smem<T, A>(n), cuda::current_stream()>>>(p, dp.data(), ds.data(), n,
                                                                                           Q * n * n);
        cuda::detail::check_launch("softmax_grad_blocks");
        gemm_batched<T, A>(scale, S, Batched<T>{{k, n, d, ld, false}, uw}, A(0), dq, ld, uw, count);   // dQ = dS·K/√d
        gemm_batched<T, A>(scale, St, Batched<T>{{q, n, d, ld, false}, uw}, A(1), dk, ld, uw, count);  // dK += dSᵀ·Q/√d
      }
    if constexpr (std::is_same_v<A, T>) {
      return acc;
    } else {
      M<T> out(acc.rows(), acc.cols());
      launch_flat(sz(acc.size()), "convert", [&](unsigned g, cudaStream_t st) {
        cuda::nn_kernels::convert<<<g, cuda::kernels::kThreads, 0, st>>>(acc.data(), out.data(), sz(acc.size()));
      });
      return out;
    }
  }

#if defined(SHARDALG_WITH_CUDNN)
  // ---- fused causal attention (cuDNN; cudnn_attention.hpp) ------------------------------------
  // On a local fused-QKV block of MHA units (one query head per K/V head: unit u = [Q_u | K_u | V_u],
  // each d wide): Q, K, V are read in place as [batch, U, seq, d] views (strides n·ld, 3d, ld) and
  // dQ, dK, dV written in place into a block of the same shape; O is [tokens, U·d].

  template <class T>
  struct FlashOut {
    M<T> out;      // [tokens, U·d], as causal_attention's
    M<float> lse;  // [batch·U·seq, 1]: log Σ_j exp(S_ij), what the backward needs instead of P
  };
  /// Whether the fused path takes this problem: 16-bit storage, MHA units (GQA's several query
  /// heads per unit do not form one strided view), and cuDNN builds both graphs on this device
  /// (head dims 64 and 128 on sm_90). Otherwise the layer takes causal_attention. *why: the reason.
  /// The environment variable SHARDALG_CUDA_ATTENTION=unfused turns the fused path off (to compare).
  template <class T>
  static bool flash_supported(const M<T>& qkv, const AttnShape& s, std::string* why = nullptr) {
    if constexpr (!cuda::HalfElement<T>) {
      if (why) *why = "fused attention needs bf16 or fp16 storage";
      return false;
    } else {
      if (s.q_per_unit != 1) {
        if (why) *why = shardalg::detail::cat("fused attention takes one query head per K/V head, got ", s.q_per_unit);
        return false;
      }
      if (qkv.size() == 0) return false;
      static const bool off = [] {  // for comparisons: SHARDALG_CUDA_ATTENTION=unfused
        const char* e = std::getenv("SHARDALG_CUDA_ATTENTION");
        return e != nullptr && std::string_view(e) == "unfused";
      }();
      if (off) {
        if (why) *why = "SHARDALG_CUDA_ATTENTION=unfused";
        return false;
      }
      return cuda::cudnn::supported(problem<T>(qkv, s), why);
    }
  }
  template <class T>
  static FlashOut<T> flash_attention(const M<T>& qkv, const AttnShape& s) {
    FlashOut<T> o{M<T>(s.batch * s.seq, s.out_width()), M<float>(s.batch * s.units * s.seq, 1)};
    const Index d = s.head_dim;
    cuda::cudnn::forward(problem<T>(qkv, s), qkv.data(), qkv.data() + d, qkv.data() + 2 * d, o.out.data(),
                         o.lse.data(), cuda::current_stream());
    return o;
  }
  template <class T>
  static M<T> flash_attention_grad(const M<T>& qkv, const M<T>& out, const M<float>& lse, const M<T>& dout,
                                   const AttnShape& s) {
    M<T> dqkv(qkv.rows(), qkv.cols());  // every column written: [dQ_u | dK_u | dV_u] for each unit
    const Index d = s.head_dim;
    cuda::cudnn::backward(problem<T>(qkv, s), qkv.data(), qkv.data() + d, qkv.data() + 2 * d, out.data(), dout.data(),
                          lse.data(), dqkv.data(), dqkv.data() + d, dqkv.data() + 2 * d, cuda::current_stream());
    return dqkv;
  }
#endif

 private:
#if defined(SHARDALG_WITH_CUDNN)
  template <class T>
  static cuda::cudnn::AttnProblem problem(const M<T>& qkv, const AttnShape& s) {
    const Index n = s.seq, ld = qkv.cols(), uw = s.unit_width(), ow = s.out_width();
    cuda::cudnn::AttnProblem p;
    p.batch = s.batch;
    p.heads = s.units;
    p.seq = n;
    p.head_dim = s.head_dim;
    p.bf16 = std::is_same_v<T, cuda::bf16>;
    p.qkv = {n * ld, uw, ld};
    p.out = {n * ow, s.head_dim, ow};
    p.dqkv = p.qkv;
    return p;
  }
#endif
  static std::size_t sz(Index n) { return static_cast<std::size_t>(n); }
  /// Dynamic shared memory of the softmax kernels: one row of n values of A. Above the default
  /// 48 KiB (n > 12,288 in fp32) the kernels are opted in to the device's larger limit once.
  template <class T, class A>
  static std::size_t row_smem(Index n) {
    const std::size_t bytes = sz(n) * sizeof(A);
    if (bytes > 48 * 1024) {
      int dev = 0, limit = 0;
      SHARDALG_CUDA_CHECK(cudaGetDevice(&dev));
      SHARDALG_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
      if (bytes > static_cast<std::size_t>(limit))
        throw ShapeError(shardalg::detail::cat("causal attention on CUDA: a row of ", n, " scores needs ", bytes,
                                               " bytes of shared memory; this device allows ", limit));
      SHARDALG_CUDA_CHECK(cudaFuncSetAttribute(cuda::nn_kernels::causal_softmax_blocks<T, A>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      SHARDALG_CUDA_CHECK(cudaFuncSetAttribute(cuda::nn_kernels::softmax_grad_blocks<T, A>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    }
    return bytes;
  }
  /// Launch a grid-stride kernel over n elements on the current stream, then check the launch.
  template <class L>
  static void launch_flat(std::size_t n, const char* what, L launch) {
    launch(cuda::kernels::blocks_for(n), cuda::current_stream());
    cuda::detail::check_launch(what);
  }
  /// Launch a kernel over a block's rows × columns (SHARDALG_ROWS_COLS) on the current stream.
  template <class Mat, class L>
  static void launch_grid(const Mat& m, const char* what, L launch) {
    launch(cuda::kernels::grid_rows_cols(sz(m.rows()), sz(m.cols())), cuda::current_stream());
    cuda::detail::check_launch(what);
  }
  /// Launch a dropout kernel (for_dropout_quads) over a block at global column c0.
  template <class Mat, class L>
  static void launch_dropout(const Mat& m, Index c0, const char* what, L launch) {
    launch(cuda::nn_kernels::dropout_grid(sz(m.rows()), sz(m.cols()), c0), cuda::current_stream());
    cuda::detail::check_launch(what);
  }
  /// Launch a one-block-per-row kernel.
  template <class L>
  static void launch_rows(Index rows, const char* what, L launch) {
    launch(static_cast<unsigned>(rows), cuda::current_stream());
    cuda::detail::check_launch(what);
  }
};

}  // namespace shardalg::nn
