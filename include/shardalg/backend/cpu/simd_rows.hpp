// shardalg/backend/cpu/simd_rows.hpp — the float row kernels of the norms and the attention backward
// (row sums, dot products, the normalisation and its adjoint on one row), vectorised without
// -march=native in the way of backend/cpu/simd.hpp: an AVX2 + FMA path compiled under a target pragma
// and a portable scalar path, chosen at run time by simd::level(), with the same bits.
//
// A reduction's bits depend on its order, and Eigen's row sums take their order from the build's
// packet width (4 lanes for SSE2, 8 for AVX, 16 for AVX-512): a float LayerNorm used to change
// with -march. Here the order is fixed, the one exp_sum uses: lane l (0 ≤ l < 8) adds the elements
// l, l + 8, l + 16, … in turn, starting from +0, and the eight lanes are combined as
// (l0 + l4, l1 + l5, l2 + l6, l3 + l7) → ((·0 + ·2), (·1 + ·3)) → one (simd::scalar::lanes_sum).
// Every multiply-add is an explicit fma; a product that is then added is rounded first (opaque).
//
//   sum(x, n)                          Σ x_k
//   sum_sq_dev(x, m, n)                Σ (x_k − m)²           lane: acc = fma(d, d, acc), d = x_k − m
//   dot(a, b, n)                       Σ a_k·b_k              lane: acc = fma(a_k, b_k, acc)
//   norm_grad_sums(dy, γ, x̂, n)        (Σ g_k, Σ g_k·x̂_k), g_k = dy_k·γ_k rounded; lanes: s0 += g,
//                                      s1 = fma(g, x̂_k, s1)
//   norm_row(x, m, rstd, γ, β, x̂, y, n)        x̂ = (x − m)·rstd; y = x̂·γ, or fma(x̂, γ, β) with β
//   norm_grad_row(dy, γ, x̂, mg, mgx, rstd, r, dx, n)
//                                      dx = rstd·fma(−x̂, mgx, g − mg) (LayerNorm's
//                                      rstd·(g − Σg/n − x̂·Σg·x̂/n); mg = 0 for RMSNorm), then
//                                      r + dx with dx rounded first when a residual r is given
//
// tests/unit/test_simd_rows.cpp checks both paths against a scalar loop written from this text,
// and the results against double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "shardalg/backend/cpu/simd.hpp"

namespace shardalg::simd {

// ---- the scalar path: the reference semantics ------------------------------------------------
namespace scalar {
inline float sum(const float* x, std::int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) l[i % 8] += x[i];
  return lanes_sum(l);
}
inline float sum_sq_dev(const float* x, float m, std::int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = x[i] - m;
    l[i % 8] = std::fma(d, d, l[i % 8]);
  }
  return lanes_sum(l);
}
inline float dot(const float* a, const float* b, std::int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) l[i % 8] = std::fma(a[i], b[i], l[i % 8]);
  return lanes_sum(l);
}
inline void norm_grad_sums(const float* dy, const float* gamma, const float* xhat, std::int64_t n, float& s0,
                           float& s1) {
  float l0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, l1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = opaque(dy[i] * gamma[i]);
    l0[i % 8] += g;
    l1[i % 8] = std::fma(g, xhat[i], l1[i % 8]);
  }
  s0 = lanes_sum(l0);
  s1 = lanes_sum(l1);
}
inline void norm_row(const float* x, float m, float rstd, const float* gamma, const float* beta, float* xhat, float* y,
                     std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float xh = (x[i] - m) * rstd;
    xhat[i] = xh;
    y[i] = beta ? std::fma(xh, gamma[i], beta[i]) : xh * gamma[i];
  }
}
inline void norm_grad_row(const float* dy, const float* gamma, const float* xhat, float mg, float mgx, float rstd,
                          const float* r, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = opaque(dy[i] * gamma[i]);
    const float v = opaque(std::fma(-xhat[i], mgx, g - mg) * rstd);
    dx[i] = r ? r[i] + v : v;
  }
}
}  // namespace scalar

#if defined(SHARDALG_SIMD_X86)
// ---- the AVX2 + FMA path ---------------------------------------------------------------------
SHARDALG_SIMD_AVX2_BEGIN
namespace avx2 {
/// Lanes [0, len) all ones, the rest zero.
inline V lanes_below(std::int64_t len) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(len)), idx));
}
/// The eight lanes combined in scalar::lanes_sum's order.
inline float lanes_sum(V acc) {
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // l + (l + 4)
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                        // (0 + 2), (1 + 3)
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}
// The reductions load a tail through load(), which pads with +0: a padding lane then adds +0 (or
// fma(0, 0, acc)) to a lane that is never −0, which leaves it as the scalar path leaves it.
inline float sum_n(const float* x, std::int64_t n) {
  V acc = _mm256_setzero_ps();
  each(n, [&](std::int64_t i, std::int64_t l) { acc = _mm256_add_ps(acc, load(x + i, l)); });
  return lanes_sum(acc);
}
inline float sum_sq_dev_n(const float* x, float m, std::int64_t n) {
  V acc = _mm256_setzero_ps();
  const V mv = set(m);
  each(n, [&](std::int64_t i, std::int64_t l) {
    V d = _mm256_sub_ps(load(x + i, l), mv);
    if (l < 8) d = _mm256_and_ps(d, lanes_below(l));  // padding lanes: d = 0, not −m
    acc = _mm256_fmadd_ps(d, d, acc);
  });
  return lanes_sum(acc);
}
inline float dot_n(const float* a, const float* b, std::int64_t n) {
  V acc = _mm256_setzero_ps();
  each(n, [&](std::int64_t i, std::int64_t l) { acc = _mm256_fmadd_ps(load(a + i, l), load(b + i, l), acc); });
  return lanes_sum(acc);
}
inline void norm_grad_sums_n(const float* dy, const float* gamma, const float* xhat, std::int64_t n, float& s0,
                             float& s1) {
  V a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  each(n, [&](std::int64_t i, std::int64_t l) {
    const V g = opaque(_mm256_mul_ps(load(dy + i, l), load(gamma + i, l)));
    a0 = _mm256_add_ps(a0, g);
    a1 = _mm256_fmadd_ps(g, load(xhat + i, l), a1);
  });
  s0 = lanes_sum(a0);
  s1 = lanes_sum(a1);
}
inline void norm_row_n(const float* x, float m, float rstd, const float* gamma, const float* beta, float* xhat,
                       float* y, std::int64_t n) {
  const V mv = set(m), rv = set(rstd);
  each(n, [&](std::int64_t i, std::int64_t l) {
    const V xh = _mm256_mul_ps(_mm256_sub_ps(load(x + i, l), mv), rv);
    store(xhat + i, xh, l);
    const V gv = load(gamma + i, l);
    store(y + i, beta ? _mm256_fmadd_ps(xh, gv, load(beta + i, l)) : _mm256_mul_ps(xh, gv), l);
  });
}
inline void norm_grad_row_n(const float* dy, const float* gamma, const float* xhat, float mg, float mgx, float rstd,
                            const float* r, float* dx, std::int64_t n) {
  const V mgv = set(mg), mgxv = set(mgx), rv = set(rstd);
  each(n, [&](std::int64_t i, std::int64_t l) {
    const V g = opaque(_mm256_mul_ps(load(dy + i, l), load(gamma + i, l)));
    const V v = opaque(_mm256_mul_ps(_mm256_fnmadd_ps(load(xhat + i, l), mgxv, _mm256_sub_ps(g, mgv)), rv));
    store(dx + i, r ? _mm256_add_ps(load(r + i, l), v) : v, l);
  });
}
}  // namespace avx2
SHARDALG_SIMD_AVX2_END
#endif  // SHARDALG_SIMD_X86

// ---- dispatch ------------------------------------------------------------------------------
inline float sum(const float* x, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(sum_n(x, n));
  return scalar::sum(x, n);
}
inline float sum_sq_dev(const float* x, float m, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(sum_sq_dev_n(x, m, n));
  return scalar::sum_sq_dev(x, m, n);
}
inline float dot(const float* a, const float* b, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(dot_n(a, b, n));
  return scalar::dot(a, b, n);
}
inline void norm_grad_sums(const float* dy, const float* gamma, const float* xhat, std::int64_t n, float& s0, float& s1) {
  SHARDALG_SIMD_DISPATCH(norm_grad_sums_n(dy, gamma, xhat, n, s0, s1));
  scalar::norm_grad_sums(dy, gamma, xhat, n, s0, s1);
}
/// beta may be null (RMSNorm, or a LayerNorm without bias); xhat and y: n elements each.
inline void norm_row(const float* x, float m, float rstd, const float* gamma, const float* beta, float* xhat, float* y,
                     std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(norm_row_n(x, m, rstd, gamma, beta, xhat, y, n));
  scalar::norm_row(x, m, rstd, gamma, beta, xhat, y, n);
}
/// r (the residual cotangent) may be null.
inline void norm_grad_row(const float* dy, const float* gamma, const float* xhat, float mg, float mgx, float rstd,
                          const float* r, float* dx, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(norm_grad_row_n(dy, gamma, xhat, mg, mgx, rstd, r, dx, n));
  scalar::norm_grad_row(dy, gamma, xhat, mg, mgx, rstd, r, dx, n);
}

}  // namespace shardalg::simd
