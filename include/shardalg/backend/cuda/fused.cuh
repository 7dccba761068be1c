// shardalg/backend/cuda/fused.cuh — nn::Fused<CudaBackend>: the passes between the GEMMs
// (backend/fused.hpp) as single sweeps on the device, instead of the generic composition's
// chain of map / zip / add_row kernels and their intermediate blocks.
//
//   bias_act(Y, b, GeLU)        H = Y + b (into Y), A = GeLU(H): one kernel, H rounded to T before
//                               the activation reads it, as the unfused add_row then map
//   act_grad(H, dA, GeLU, db)   dH = dA ⊙ GeLU′(H) in one kernel (one rounding, not two); db = Σ_rows dH
//                               by the two-pass column sum (backend.hpp, col_sum_into)
//   norm_forward(x, γ, β)       the row's statistics and x̂, y in one kernel per row (the row read
//                               from DRAM once; the arithmetic of row_mean_var + norm_apply)
//   norm_backward(…)            dX (+ the residual cotangent R) in one kernel per row; dγ = Σ_rows
//                               dY ⊙ x̂ summed while the product is formed (no [rows, n] product
//                               block); dβ = Σ_rows dY
//   dropout_add(X, Z, p, …)     X + dropout(Z) in one kernel, the mask nn::dropout_uniform at the
//                               global index (the CPU's bit for bit, as Kernels<CudaBackend>::dropout)
//   bias_dropout_add(X, Z, b, …) X + dropout(Z + b): a row-parallel layer's output bias (after its
//                               reduction) in the same kernel (nn::Dropout::forward_bias_add)
//
// And, beyond the generic contract, the passes folded into the GEMMs themselves (cuBLASLt
// epilogues, lt_gemm.hpp), which the linear layers take when a backend's Fused offers them
// (nn/layers/linear.hpp, FusedEpilogues) and fall back from when they return nothing:
//
//   gemm_bias(X, W, b)          Y = X·W + b                      (X[R] · W[C] + b[C] → Y[C])
//   gemm_bias_act(X, W, b, act) H = X·W + b, A = GeLU(H)          (fc1; GeLU tanh)
//   gemm_wgrad_bgrad(X, dY)     dW = Xᵀ·dY, db = Σ_rows dY       (the weight and bias gradients)
//
// SHARDALG_CUDA_EPILOGUES=off turns them off (to compare). 16-bit storage only.
//
// SwiGLU keeps the Kernels<CudaBackend> path (already one kernel).
// Arithmetic in acc_t<T> (float for the 16-bit types); each stored value rounded to T once.
// Needs nvcc.
#pragma once

#if !defined(__CUDACC__)
#error "shardalg/backend/cuda/fused.cuh needs the CUDA compiler: compile this translation unit as .cu"
#endif

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "shardalg/backend/activation.hpp"
#include "shardalg/backend/cuda/backend.hpp"
#include "shardalg/backend/cuda/kernels.cuh"
#include "shardalg/backend/cuda/lt_gemm.hpp"
#include "shardalg/backend/fused.hpp"

namespace shardalg::cuda::fused_kernels {

/// y := round(y + b) (the pre-activation H, kept for the backward); a := round(act(H)).
template <class T, class Act>
__global__ void bias_act(T* __restrict__ y, const T* __restrict__ b, T* __restrict__ a, std::size_t rows,
                         std::size_t cols, Act act) {
  SHARDALG_ROWS_COLS(r, j, rows, cols) {
    const std::size_t i = r * cols + j;
    const T h = b ? from_compute<T>(to_compute(y[i]) + to_compute(b[j])) : y[i];
    y[i] = h;
    a[i] = from_compute<T>(act(static_cast<acc_t<T>>(to_compute(h))));
  }
}
/// dh := round(dA · act′(H)).
template <class T, class Grad>
__global__ void act_grad(const T* __restrict__ h, const T* __restrict__ da, T* __restrict__ dh, std::size_t n,
                         Grad grad) {
  using A = acc_t<T>;
  SHARDALG_GRID_STRIDE(i, n) dh[i] = from_compute<T>(static_cast<A>(to_compute(da[i])) * grad(static_cast<A>(to_compute(h[i]))));
}
/// y := round(x + mask · z′ · scale), mask(i, j) = [dropout_uniform(seed, tensor, r0 + i, c0 + j) ≥ p]
/// (nn_kernels::for_dropout_quads: one Philox block per four columns); z′ = z, or with a bias row b
/// z′ = round(z + b[j]) (the add_row it replaces).
template <class T>
__global__ void dropout_add(const T* __restrict__ x, const T* __restrict__ z, const T* __restrict__ b,
                            T* __restrict__ y, std::size_t rows, std::size_t cols, double p, acc_t<T> scale,
                            std::uint64_t seed, std::uint64_t tensor, Index r0, Index c0) {
  using A = acc_t<T>;
  nn_kernels::for_dropout_quads(rows, cols, r0, c0, p, seed, tensor, [&](std::size_t i, std::size_t j, bool keep) {
    const std::size_t idx = i * cols + j;
    const A zv = b ? static_cast<A>(to_compute(from_compute<T>(to_compute(z[idx]) + to_compute(b[j]))))
                   : static_cast<A>(to_compute(z[idx]));
    y[idx] = from_compute<T>(static_cast<A>(to_compute(x[idx])) + (keep ? zv * scale : A(0)));
  });
}

// ---- the norms, one block per row (kThreads threads): the row read from DRAM once ------------
//
// The same arithmetic as Kernels<CudaBackend>'s row_mean_var + norm_apply and norm_grad_sums +
// norm_grad_apply (+ zip): each thread sums the columns j ≡ threadIdx.x (mod kThreads) in order,
// block_sum adds the partials, and the statistics are rounded to T where the unfused path stores
// them. Only the launches and the intermediate [rows, 2] blocks are gone; later passes over the
// row hit L1.

/// Per row: (mean, var) as row_mean_var (rounded to T), then x̂ = (x − mean)·rstd, y = x̂ ⊙ γ (+ β),
/// rstd = 1/√(var + eps), as norm_apply.
template <class T>
__global__ void norm_forward_rows(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                                  T* __restrict__ y, T* __restrict__ xhat, T* __restrict__ rstd_out, std::size_t cols,
                                  bool center, T eps) {
  using A = acc_t<T>;
  using nn_kernels::ld;
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  const T* xr = x + off;
  A mean = 0;
  if (center) {
    A s = 0;
    for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) s += ld(xr, j);
    mean = kernels::block_sum(s) / static_cast<A>(cols);
  }
  A v = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A d = ld(xr, j) - mean;
    v += d * d;
  }
  v = kernels::block_sum(v) / static_cast<A>(cols);
  const A mean_t = static_cast<A>(to_compute(from_compute<T>(mean)));  // as stored in mv
  const A var_t = static_cast<A>(to_compute(from_compute<T>(v)));
  const A rstd = A(1) / sqrt(var_t + static_cast<A>(to_compute(eps)));
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A xh = (ld(xr, j) - mean_t) * rstd;
    A out = xh * ld(gamma, j);
    if (beta) out += ld(beta, j);
    xhat[off + j] = from_compute<T>(xh);
    y[off + j] = from_compute<T>(out);
  }
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = from_compute<T>(rstd);
}

/// Per row: (Σ g, Σ g·x̂), g = dy ⊙ γ, rounded to T as norm_grad_sums; then
/// dx = rstd·(g − Σg/n − x̂·Σ(g·x̂)/n) as norm_grad_apply (RMSNorm: no Σg/n), and with a residual
/// cotangent r, dx := r + dx (the zip after it), each rounded to T.
template <class T>
__global__ void norm_backward_rows(const T* __restrict__ dy, const T* __restrict__ xhat, const T* __restrict__ gamma,
                                   const T* __restrict__ rstd, const T* __restrict__ residual, T* __restrict__ dx,
                                   std::size_t cols, Index n, bool center) {
  using A = acc_t<T>;
  using nn_kernels::ld;
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  A sg = 0, sgx = 0;
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = ld(dy, off + j) * ld(gamma, j);
    sg += g;
    sgx += g * ld(xhat, off + j);
  }
  sg = kernels::block_sum(sg);
  sgx = kernels::block_sum(sgx);
  const A mg = center ? static_cast<A>(to_compute(from_compute<T>(sg))) / static_cast<A>(n) : A(0);
  const A mgx = static_cast<A>(to_compute(from_compute<T>(sgx))) / static_cast<A>(n);
  const A r = ld(rstd, blockIdx.x);
  for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const T d = from_compute<T>((ld(dy, off + j) * ld(gamma, j) - mg - ld(xhat, off + j) * mgx) * r);
    dx[off + j] = residual ? from_compute<T>(ld(residual, off + j) + static_cast<A>(to_compute(d))) : d;
  }
}

/// act_grad with 16-byte loads and stores: 8 16-bit elements per step (n a multiple of 8, the
/// blocks 16-byte aligned); the same arithmetic per element.
template <class T, class Grad>
__global__ void act_grad_x8(const T* __restrict__ h, const T* __restrict__ da, T* __restrict__ dh, std::size_t n8,
                            Grad grad) {
  static_assert(sizeof(T) == 2, "8 elements of 2 bytes per 16-byte access");
  using A = acc_t<T>;
  const auto* h4 = reinterpret_cast<const uint4*>(h);
  const auto* da4 = reinterpret_cast<const uint4*>(da);
  auto* dh4 = reinterpret_cast<uint4*>(dh);
  SHARDALG_GRID_STRIDE(i, n8) {
    uint4 hv = h4[i], dv = da4[i], out;
    const T* hs = reinterpret_cast<const T*>(&hv);
    const T* ds = reinterpret_cast<const T*>(&dv);
    T* os = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      os[k] = from_compute<T>(static_cast<A>(to_compute(ds[k])) * grad(static_cast<A>(to_compute(hs[k]))));
    dh4[i] = out;
  }
}

}  // namespace shardalg::cuda::fused_kernels

namespace shardalg::nn {

template <>
struct Fused<cuda::CudaBackend> : FusedComposed<cuda::CudaBackend> {
  using B = cuda::CudaBackend;
  template <class T>
  using M = B::matrix<T>;

  /// y (the GEMM output) becomes H = y + b; returns A = act(H). SwiGLU: [rows, 2w] → [rows, w].
  template <class T>
  static M<T> bias_act(M<T>& y, const M<T>* b, Activation act) {
    switch (act) {
      case Activation::gelu_tanh: return bias_act_with(y, b, GeluTanh{});
      case Activation::gelu_erf: return bias_act_with(y, b, GeluErf{});
      case Activation::swiglu: break;
    }
    if (b) y = B::add_row(y, *b);
    return Kernels<B>::swiglu(y);
  }
  /// dH from dA; *db := Σ_rows dH when db is given.
  template <class T>
  static M<T> act_grad(const M<T>& h, M<T>&& da, Activation act, M<T>* db) {
    M<T> dh = [&] {
      switch (act) {
        case Activation::gelu_tanh: return act_grad_with(h, da, GeluTanhGrad{});
        case Activation::gelu_erf: return act_grad_with(h, da, GeluErfGrad{});
        case Activation::swiglu: break;
      }
      return Kernels<B>::swiglu_grad(h, da);
    }();
    if (db) *db = B::col_sum(dh);
    return dh;
  }
  template <class T>
  using NormOut = FusedComposed<B>::NormOut<T>;
  /// Statistics and normalisation in one kernel per row (fused_kernels::norm_forward_rows).
  template <class T>
  static NormOut<T> norm_forward(const M<T>& x, const M<T>& gamma, const M<T>* beta, T eps, bool center) {
    if (x.size() == 0) return FusedComposed<B>::norm_forward(x, gamma, beta, eps, center);
    NormOut<T> o{M<T>(x.rows(), x.cols()), M<T>(x.rows(), x.cols()), M<T>(x.rows(), 1)};
    cuda::fused_kernels::norm_forward_rows<<<static_cast<unsigned>(x.rows()), cuda::kernels::kThreads, 0,
                                             cuda::current_stream()>>>(x.data(), gamma.data(),
                                                                       beta ? beta->data() : nullptr, o.y.data(),
                                                                       o.xhat.data(), o.rstd.data(), sz(x.cols()),
                                                                       center, eps);
    cuda::detail::check_launch("fused norm_forward");
    return o;
  }
  template <class T>
  using NormGrads = FusedComposed<B>::NormGrads<T>;
  /// dX (+ R) in one kernel per row (fused_kernels::norm_backward_rows); dγ = Σ_rows dY ⊙ x̂ summed
  /// while the product is formed; dβ = Σ_rows dY.
  template <class T>
  static NormGrads<T> norm_backward(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd,
                                    bool center, bool want_dbeta, const M<T>* residual = nullptr) {
    if (residual && (residual->rows() != dy.rows() || residual->cols() != dy.cols()))
      throw ShapeError(shardalg::detail::cat("Fused<CudaBackend>::norm_backward: residual ", residual->rows(), "x",
                                             residual->cols(), " for dY ", dy.rows(), "x", dy.cols()));
    NormGrads<T> g{M<T>(dy.rows(), dy.cols()), M<T>(1, dy.cols()), {}};
    if (dy.rows() > 0)
      cuda::fused_kernels::norm_backward_rows<<<static_cast<unsigned>(dy.rows()), cuda::kernels::kThreads, 0,
                                                cuda::current_stream()>>>(
          dy.data(), xhat.data(), gamma.data(), rstd.data(), residual ? residual->data() : nullptr, g.dx.data(),
          sz(dy.cols()), dy.cols(), center);
    cuda::detail::check_launch("fused norm_backward");
    cuda::detail::col_sum_into(g.dgamma.data(), sz(dy.rows()), sz(dy.cols()),
                               cuda::kernels::LoadProduct<T>{dy.data(), xhat.data()});
    if (want_dbeta) g.dbeta = B::col_sum(dy);
    return g;
  }
  /// x + dropout(z) (p = 0: x + z).
  template <class T>
  static M<T> dropout_add(const M<T>& x, const M<T>& z, double p, std::uint64_t seed, std::uint64_t tensor, Index r0,
                          Index c0) {
    if (p == 0.0) return B::zip(x, z, fn::plus{});
    return dropout_add_with<T>(x, z, nullptr, p, seed, tensor, r0, c0);
  }
  /// x + dropout(z + b), b a bias row [1, cols] (a row-parallel layer's output bias, added after
  /// its reduction): the add_row, the dropout and the residual add in one kernel.
  template <class T>
  static M<T> bias_dropout_add(const M<T>& x, const M<T>& z, const M<T>& b, double p, std::uint64_t seed,
                               std::uint64_t tensor, Index r0, Index c0) {
    if (b.rows() != 1 || b.cols() != z.cols())
      throw ShapeError(shardalg::detail::cat("Fused<CudaBackend>::bias_dropout_add: bias ", b.rows(), "x", b.cols(),
                                             " for ", z.rows(), "x", z.cols()));
    if (p == 0.0) return B::zip(x, B::add_row(z, b), fn::plus{});
    return dropout_add_with(x, z, b.data(), p, seed, tensor, r0, c0);
  }

  // ---- GEMMs with an epilogue (cuBLASLt): nullopt when not taken --------------------------------

  /// Y = X·W + b, the bias added in the GEMM's epilogue.
  template <class T>
  static std::optional<M<T>> gemm_bias(const M<T>& x, const M<T>& w, const M<T>& b) {
    if constexpr (!cuda::HalfElement<T>) {
      return std::nullopt;
    } else {
      if (!epilogues_on() || b.rows() != 1 || b.cols() != w.cols() || x.cols() != w.rows()) return std::nullopt;
      M<T> y(x.rows(), w.cols());
      if (!cuda::lt::matmul(cuda::current(), cuda::lt::Epilogue::bias, B::view(x), B::view(w), y.data(), y.cols(),
                            const_cast<T*>(b.data())))
        return std::nullopt;
      return y;
    }
  }
  template <class T>
  struct BiasAct {
    M<T> h, a;  // H = X·W + b (kept for the backward), A = act(H)
  };
  /// H = X·W + b and A = GeLU(H) in one GEMM (GELU_AUX_BIAS: cuBLASLt's GeLU is the tanh form).
  template <class T>
  static std::optional<BiasAct<T>> gemm_bias_act(const M<T>& x, const M<T>& w, const M<T>& b, Activation act) {
    if constexpr (!cuda::HalfElement<T>) {
      return std::nullopt;
    } else {
      // the pre-activation's leading dimension must be a multiple of 8
      if (!epilogues_on() || act != Activation::gelu_tanh || w.cols() % 8 != 0 || b.rows() != 1 ||
          b.cols() != w.cols() || x.cols() != w.rows())
        return std::nullopt;
      BiasAct<T> o{M<T>(x.rows(), w.cols()), M<T>(x.rows(), w.cols())};
      if (!cuda::lt::matmul(cuda::current(), cuda::lt::Epilogue::gelu_aux_bias, B::view(x), B::view(w), o.a.data(),
                            o.a.cols(), const_cast<T*>(b.data()), o.h.data(), o.h.cols()))
        return std::nullopt;
      return o;
    }
  }
  template <class T>
  struct WeightGrads {
    M<T> dw, db;  // dW = Xᵀ·dY, db = Σ_rows dY
  };
  /// dW = Xᵀ·dY with db = Σ_rows dY summed by the same GEMM (BGRADA).
  template <class T>
  static std::optional<WeightGrads<T>> gemm_wgrad_bgrad(const M<T>& x, const M<T>& dy) {
    if constexpr (!cuda::HalfElement<T>) {
      return std::nullopt;
    } else {
      if (!epilogues_on() || x.rows() != dy.rows()) return std::nullopt;
      WeightGrads<T> g{M<T>(x.cols(), dy.cols()), M<T>(1, dy.cols())};
      if (!cuda::lt::matmul(cuda::current(), cuda::lt::Epilogue::bgrad, B::view(x, true), B::view(dy), g.dw.data(),
                            g.dw.cols(), g.db.data()))
        return std::nullopt;
      return g;
    }
  }

 private:
  static bool epilogues_on() {
    static const bool off = [] {
      const char* e = std::getenv("SHARDALG_CUDA_EPILOGUES");
      return e != nullptr && std::string_view(e) == "off";
    }();
    return !off;
  }
  static std::size_t sz(Index n) { return static_cast<std::size_t>(n); }
  template <class T>
  static M<T> dropout_add_with(const M<T>& x, const M<T>& z, const T* b, double p, std::uint64_t seed,
                               std::uint64_t tensor, Index r0, Index c0) {
    if (x.rows() != z.rows() || x.cols() != z.cols())
      throw ShapeError(shardalg::detail::cat("Fused<CudaBackend>::dropout_add: shapes differ: ", x.rows(), "x", x.cols(),
                                             " and ", z.rows(), "x", z.cols()));
    const auto scale = static_cast<cuda::acc_t<T>>(1.0 / (1.0 - p));
    M<T> y(x.rows(), x.cols());
    if (y.size() == 0) return y;
    cuda::fused_kernels::dropout_add<<<cuda::nn_kernels::dropout_grid(sz(y.rows()), sz(y.cols()), c0), cuda::kernels::kThreads,
                                       0, cuda::current_stream()>>>(
        x.data(), z.data(), b, y.data(), sz(x.rows()), sz(x.cols()), p, scale, seed, tensor, r0, c0);
    cuda::detail::check_launch("fused dropout_add");
    return y;
  }
  template <class T, class Act>
  static M<T> bias_act_with(M<T>& y, const M<T>* b, Act act) {
    if (b && (b->rows() != 1 || b->cols() != y.cols()))
      throw ShapeError(shardalg::detail::cat("Fused<CudaBackend>::bias_act: bias ", b->rows(), "x", b->cols(), " for ",
                                             y.rows(), "x", y.cols()));
    M<T> a(y.rows(), y.cols());
    if (y.size() == 0) return a;
    cuda::fused_kernels::bias_act<<<cuda::kernels::grid_rows_cols(sz(y.rows()), sz(y.cols())), cuda::kernels::kThreads, 0,
                                    cuda::current_stream()>>>(y.data(), b ? b->data() : nullptr, a.data(),
                                                              sz(y.rows()), sz(y.cols()), act);
    cuda::detail::check_launch("fused bias_act");
    return a;
  }
  template <class T, class Grad>
  static M<T> act_grad_with(const M<T>& h, const M<T>& da, Grad grad) {
    if (h.rows() != da.rows() || h.cols() != da.cols())
      throw ShapeError(shardalg::detail::cat("Fused<CudaBackend>::act_grad: shapes differ: ", h.rows(), "x", h.cols(),
                                             " and ", da.rows(), "x", da.cols()));
    M<T> dh(h.rows(), h.cols());
    if (dh.size() == 0) return dh;
    const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    if constexpr (sizeof(T) == 2)
      if (sz(dh.size()) % 8 == 0 && aligned(h.data()) && aligned(da.data()) && aligned(dh.data())) {
        const std::size_t n8 = sz(dh.size()) / 8;
        cuda::fused_kernels::act_grad_x8<<<cuda::kernels::blocks_for(n8), cuda::kernels::kThreads, 0,
                                           cuda::current_stream()>>>(h.data(), da.data(), dh.data(), n8, grad);
        cuda::detail::check_launch("fused act_grad");
        return dh;
      }
    cuda::fused_kernels::act_grad<<<cuda::kernels::blocks_for(sz(dh.size())), cuda::kernels::kThreads, 0,
                                    cuda::current_stream()>>>(h.data(), da.data(), dh.data(), sz(dh.size()), grad);
    cuda::detail::check_launch("fused act_grad");
    return dh;
  }
};

}  // namespace shardalg::nn
