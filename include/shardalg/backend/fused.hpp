// shardalg/backend/fused.hpp — fused local kernels: the passes around the GEMMs, each one sweep of
// memory instead of several, with the same results as the unfused operations they replace.
//
//   bias_act(y, b, act)          H = Y + b in place of Y, A = act(H)        (Megatron's
//                                bias_activation_fusion: one pass, no separate bias add)
//   act_grad(h, dA, act, db)     dH = dA ⊙ act'(H) (SwiGLU: the gated product's adjoint) and the
//                                bias gradient Σ_rows dH in the same pass
//   norm_forward(x, γ, β, eps)   per row: statistics and normalisation while the row is in L1
//   norm_backward(dy, x̂, γ, rstd)  per row: the two sums and dX; dγ = Σ dY ⊙ x̂, dβ = Σ dY in the
//                                same pass; given a residual cotangent R, dX := R + dX while the row is
//                                in cache (the block's backward residual adds: dY1 = dY + LN2′(…))
//   dropout_add(x, z, …)         X + dropout(Z) in one pass (the residual add after a sub-layer)
//
// `Fused<Backend>`: the primary template composes the backend's unfused operations (so a backend
// without fused kernels, CUDA's, still runs every layer); the CPU specialisation (backend/cpu/fused.hpp) fuses.
//
// Same bits as the unfused path, tested in tests/unit/test_fused.cpp on both ISA paths:
//   * elementwise: the same IEEE operations on the same values (products that the unfused path
//     rounds before an add are rounded here too: simd::scalar::opaque), float GeLU/SwiGLU through
//     backend/cpu/simd.hpp, the same functions `map` uses; other types through the same functors;
//   * column sums: added in the order of the core's col_sum (backend/cpu/col_sum_order.hpp: Eigen's);
//   * norms: Kernels<CpuBackend>'s row functions (row_stats, norm_row, grad_row_sums, grad_row;
//     float through backend/cpu/simd_rows.hpp), in one loop.
#pragma once

#include <cstdint>

#include "shardalg/backend/activation.hpp"
#include "shardalg/backend/kernels.hpp"
#include "shardalg/base/functors.hpp"

namespace shardalg::nn {

/// The generic (unfused) composition: any backend with the core's operations and Kernels<B>. A
/// backend's specialisation of Fused may derive from it and replace only the passes it fuses.
template <class B>
struct FusedComposed {
  template <class T>
  using M = typename B::template matrix<T>;

  /// y (the GEMM output) becomes H = y + b; returns A = act(H). SwiGLU: [rows, 2w] → [rows, w].
  template <class T>
  static M<T> bias_act(M<T>& y, const M<T>* b, Activation act) {
    if (b) y = B::add_row(y, *b);
    switch (act) {
      case Activation::gelu_tanh: return B::map(y, GeluTanh{});
      case Activation::gelu_erf: return B::map(y, GeluErf{});
      case Activation::swiglu: break;
    }
    return Kernels<B>::swiglu(y);
  }
  /// dH from dA (dA's storage may be reused); *db := Σ_rows dH when db is given.
  template <class T>
  static M<T> act_grad(const M<T>& h, M<T>&& da, Activation act, M<T>* db) {
    M<T> dh = [&] {
      switch (act) {
        case Activation::gelu_tanh: return B::zip(da, B::map(h, GeluTanhGrad{}), fn::times{});
        case Activation::gelu_erf: return B::zip(da, B::map(h, GeluErfGrad{}), fn::times{});
        case Activation::swiglu: break;
      }
      return Kernels<B>::swiglu_grad(h, da);
    }();
    if (db) *db = B::col_sum(dh);
    return dh;
  }
  template <class T>
  using NormOut = typename Kernels<B>::template NormOut<T>;
  template <class T>
  static NormOut<T> norm_forward(const M<T>& x, const M<T>& gamma, const M<T>* beta, T eps, bool center) {
    return Kernels<B>::norm_apply(x, Kernels<B>::row_mean_var(x, center), gamma, beta, eps);
  }
  template <class T>
  struct NormGrads {
    M<T> dx, dgamma, dbeta;  // dbeta empty when not asked for
  };
  template <class T>
  static NormGrads<T> norm_backward(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd,
                                    bool center, bool want_dbeta, const M<T>* residual = nullptr) {
    const auto sums = Kernels<B>::norm_grad_sums(dy, xhat, gamma);
    NormGrads<T> g{Kernels<B>::norm_grad_apply(dy, xhat, gamma, rstd, sums, dy.cols(), center),
                   B::col_sum(B::zip(dy, xhat, fn::times{})), {}};
    if (want_dbeta) g.dbeta = B::col_sum(dy);
    if (residual) g.dx = B::zip(*residual, g.dx, fn::plus{});  // R + dX
    return g;
  }
  /// x + dropout(z) (p = 0: x + z).
  template <class T>
  static M<T> dropout_add(const M<T>& x, const M<T>& z, double p, std::uint64_t seed, std::uint64_t tensor, Index r0,
                          Index c0) {
    if (p == 0.0) return B::zip(x, z, fn::plus{});
    return B::zip(x, Kernels<B>::dropout(z, p, seed, tensor, r0, c0), fn::plus{});
  }
};

/// A backend's fused passes: the generic composition unless the backend specialises it
/// (backend/cpu/fused.hpp, backend/cuda/fused.cuh).
template <class B>
struct Fused : FusedComposed<B> {};

}  // namespace shardalg::nn
