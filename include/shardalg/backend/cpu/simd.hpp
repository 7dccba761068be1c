// shardalg/backend/cpu/simd.hpp — the float elementwise math of the layers (GeLU-tanh, its derivative,
// exp), vectorised without -march=native: a header-only library cannot choose its users' flags,
// so each kernel exists twice, for AVX2 + FMA (compiled under a target pragma, whatever the
// command line says) and portable scalar code, and the first call picks one by what the CPU has
// (`level()`; SHARDALG_SIMD=scalar in the environment, or set_level, forces the scalar path).
//
// Both paths give the same bits, on every CPU and under every set of flags: every operation is
// an IEEE single operation or an explicit fused multiply-add (std::fma in the scalar path), and
// no product ever meets an add in a form the compiler could contract (opaque() marks the one
// place where that would otherwise be possible). So a Release build, a -march=native build and
// a CPU without AVX2 compute identical float GeLUs (Eigen's own tanh differs between its SSE and
// AVX builds).
//
// The functions (x, y contiguous, n elements, y may equal x):
//   exp:        e^x, x clamped to [−86, 88]: n = round(x·log2 e), r = x − n·ln 2 (two fma), a
//               degree-7 Taylor polynomial on |r| ≤ ½ln 2 (Horner, fma), 2^n added to the exponent
//   gelu_tanh:  ½x(1 + tanh(u)) = x·σ(2u) = x / (1 + e^(−2u)), u = √(2/π)(x + 0.044715x³)
//               (no cancellation at negative x, where 1 + tanh(u) loses the digits)
//   gelu_tanh_grad:  d/dx = s + 2x·s(1 − s)·√(2/π)(1 + 3·0.044715x²), s = σ(2u)
//   exp_sum:    x ← e^(x·scale − shift) (one fma) in place, returns Σ x in eight lanes (lane l adds the elements
//               l, l + 8, …; then (l0 + l4, l1 + l5, l2 + l6, l3 + l7) → ((·0 + ·2), (·1 + ·3)) → one):
//               the softmax's exponentials and their sum in one pass
// Accuracy against double: tests/unit/test_fused.cpp measures it.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if !defined(__CUDACC__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDALG_SIMD_X86 1
#include <immintrin.h>
#endif

namespace shardalg::simd {

enum class Level { scalar, avx2 };

namespace detail {
inline Level detect() {
  if (const char* v = std::getenv("SHARDALG_SIMD"); v && std::strcmp(v, "scalar") == 0) return Level::scalar;
#if defined(SHARDALG_SIMD_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Level::avx2;
#endif
  return Level::scalar;
}
inline Level& current() {
  static Level l = detect();
  return l;
}
}  // namespace detail

/// The path the kernels take: AVX2 + FMA when the CPU has both, else scalar.
inline Level level() { return detail::current(); }
/// Force a path (tests compare them). Asking for avx2 on a CPU without it keeps scalar.
inline void set_level(Level l) { detail::current() = (l == Level::avx2 && detail::detect() != Level::avx2) ? Level::scalar : l; }
inline const char* level_name() { return level() == Level::avx2 ? "avx2+fma" : "scalar"; }

// ---- the scalar path: the reference semantics ------------------------------------------------
namespace scalar {
/// Hide a value from the optimiser so that a product is rounded before an add reads it.
inline float opaque(float v) {
#if defined(__GNUC__) || defined(__clang__)
#if defined(__x86_64__)
  __asm__("" : "+x"(v));
#else
  __asm__("" : "+r"(v));
#endif
#endif
  return v;
}
inline float exp(float x) {
  x = std::fmin(std::fmax(x, -86.0f), 88.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(-n, 0.693145751953125f, x);  // ln 2 = hi + lo, hi exact in 16 bits
  r = std::fma(-n, 1.42860682030941723212e-6f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(p) + (static_cast<std::int32_t>(n) << 23));
}
constexpr float kGeluK = 0.7978845608028654f, kGeluC = 0.044715f;
/// σ(2u) for GeLU-tanh.
inline float gelu_sigma(float x) {
  const float x2 = x * x;
  const float z = (-2.0f * kGeluK * x) * std::fma(kGeluC, x2, 1.0f);
  return 1.0f / (1.0f + exp(z));
}
inline float gelu_tanh(float x) { return x * gelu_sigma(x); }
/// The fixed reduction of eight lane sums (the AVX2 path's horizontal add, in its order).
inline float lanes_sum(const float* a) {
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}
inline float gelu_tanh_grad(float x) {
  const float s = gelu_sigma(x);
  const float g = ((2.0f * kGeluK * x) * s) * (1.0f - s);
  return std::fma(g, std::fma(3.0f * kGeluC, x * x, 1.0f), s);
}
}  // namespace scalar

#if defined(SHARDALG_SIMD_X86)
// Functions defined between these two compile for AVX2 + FMA whatever the command line targets
// (backend/cpu/simd_rows.hpp uses them too); SHARDALG_SIMD_DISPATCH(f(…)) returns avx2::f(…) when
// level() is avx2.
#if defined(__clang__)
#define SHARDALG_SIMD_AVX2_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define SHARDALG_SIMD_AVX2_END _Pragma("clang attribute pop")
#else
#define SHARDALG_SIMD_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define SHARDALG_SIMD_AVX2_END _Pragma("GCC pop_options")
#endif
#define SHARDALG_SIMD_DISPATCH(call) \
  if (level() == Level::avx2) return avx2::call
#else
#define SHARDALG_SIMD_DISPATCH(call)
#endif

#if defined(SHARDALG_SIMD_X86)
// ---- the AVX2 + FMA path: the same operations eight at a time ---------------------------------
SHARDALG_SIMD_AVX2_BEGIN
namespace avx2 {
using V = __m256;
inline V set(float v) { return _mm256_set1_ps(v); }
inline V neg(V v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
inline V opaque(V v) {
  __asm__("" : "+x"(v));
  return v;
}
inline V exp(V x) {
  x = _mm256_min_ps(_mm256_max_ps(x, set(-86.0f)), set(88.0f));
  const V n = _mm256_round_ps(_mm256_mul_ps(x, set(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const V mn = neg(n);
  V r = _mm256_fmadd_ps(mn, set(0.693145751953125f), x);
  r = _mm256_fmadd_ps(mn, set(1.42860682030941723212e-6f), r);
  V p = set(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, set(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, set(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, set(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, set(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, set(0.5f));
  p = _mm256_fmadd_ps(p, r, set(1.0f));
  p = _mm256_fmadd_ps(p, r, set(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
inline V gelu_sigma(V x) {
  const V x2 = _mm256_mul_ps(x, x);
  const V z = _mm256_mul_ps(_mm256_mul_ps(set(-2.0f * scalar::kGeluK), x), _mm256_fmadd_ps(set(scalar::kGeluC), x2, set(1.0f)));
  return _mm256_div_ps(set(1.0f), _mm256_add_ps(set(1.0f), exp(z)));
}
inline V gelu_tanh(V x) { return _mm256_mul_ps(x, gelu_sigma(x)); }
inline V gelu_tanh_grad(V x) {
  const V s = gelu_sigma(x);
  const V g = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(set(2.0f * scalar::kGeluK), x), s), _mm256_sub_ps(set(1.0f), s));
  return _mm256_fmadd_ps(g, _mm256_fmadd_ps(set(3.0f * scalar::kGeluC), _mm256_mul_ps(x, x), set(1.0f)), s);
}
/// Apply `f` (V → V) to n elements: whole vectors, then the tail through a padded vector.
template <class F>
inline void each(std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, 8);
  if (i < n) f(i, n - i);
}
inline V load(const float* p, std::int64_t len) {
  if (len == 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, static_cast<std::size_t>(len) * sizeof(float));
  return _mm256_load_ps(buf);
}
inline void store(float* p, V v, std::int64_t len) {
  if (len == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  std::memcpy(p, buf, static_cast<std::size_t>(len) * sizeof(float));
}

inline void exp_n(const float* x, float* y, std::int64_t n) {
  each(n, [&](std::int64_t i, std::int64_t l) { store(y + i, exp(load(x + i, l)), l); });
}
inline float exp_sum_n(float* x, float scale, float shift, std::int64_t n) {
  V acc = _mm256_setzero_ps();
  const V sc = set(scale), sh = set(shift);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V e = exp(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), sc, sh));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {  // the tail: padding lanes add +0, as the scalar path adds nothing to them
    alignas(32) float e[8];
    _mm256_store_ps(e, exp(_mm256_fmsub_ps(load(x + i, n - i), sc, sh)));
    for (std::int64_t l = n - i; l < 8; ++l) e[l] = 0.0f;
    std::memcpy(x + i, e, static_cast<std::size_t>(n - i) * sizeof(float));
    acc = _mm256_add_ps(acc, _mm256_load_ps(e));
  }
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // l + (l + 4)
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                        // (0 + 2), (1 + 3)
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}
inline void gelu_n(const float* x, float* y, std::int64_t n) {
  each(n, [&](std::int64_t i, std::int64_t l) { store(y + i, gelu_tanh(load(x + i, l)), l); });
}
inline void gelu_grad_n(const float* x, float* y, std::int64_t n) {
  each(n, [&](std::int64_t i, std::int64_t l) { store(y + i, gelu_tanh_grad(load(x + i, l)), l); });
}
inline void bias_gelu_n(const float* y, const float* b, float* h, float* a, std::int64_t n) {
  each(n, [&](std::int64_t i, std::int64_t l) {
    const V v = _mm256_add_ps(load(y + i, l), load(b + i, l));
    store(h + i, v, l);
    store(a + i, gelu_tanh(v), l);
  });
}
inline void gelu_grad_mul_n(const float* h, const float* da, float* dh, std::int64_t n) {
  each(n, [&](std::int64_t i, std::int64_t l) {
    store(dh + i, opaque(_mm256_mul_ps(load(da + i, l), gelu_tanh_grad(load(h + i, l)))), l);
  });
}
}  // namespace avx2
SHARDALG_SIMD_AVX2_END
#endif  // SHARDALG_SIMD_X86

// ---- dispatch ------------------------------------------------------------------------------

inline void exp(const float* x, float* y, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(exp_n(x, y, n));
  for (std::int64_t i = 0; i < n; ++i) y[i] = scalar::exp(x[i]);
}
/// x ← e^(x·scale − shift) (the argument one fma), n elements in place; returns their sum in the
/// eight-lane order above.
inline float exp_sum(float* x, float scale, float shift, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(exp_sum_n(x, scale, shift, n));
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) lanes[i % 8] += (x[i] = scalar::exp(std::fma(x[i], scale, -shift)));
  return scalar::lanes_sum(lanes);
}
inline void gelu_tanh(const float* x, float* y, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(gelu_n(x, y, n));
  for (std::int64_t i = 0; i < n; ++i) y[i] = scalar::gelu_tanh(x[i]);
}
inline void gelu_tanh_grad(const float* x, float* y, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(gelu_grad_n(x, y, n));
  for (std::int64_t i = 0; i < n; ++i) y[i] = scalar::gelu_tanh_grad(x[i]);
}
/// h = y + b, a = gelu_tanh(h) (h may be y).
inline void bias_gelu(const float* y, const float* b, float* h, float* a, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(bias_gelu_n(y, b, h, a, n));
  for (std::int64_t i = 0; i < n; ++i) {
    h[i] = y[i] + b[i];
    a[i] = scalar::gelu_tanh(h[i]);
  }
}
/// dh = da ⊙ gelu_tanh'(h) (dh may be da).
inline void gelu_grad_mul(const float* h, const float* da, float* dh, std::int64_t n) {
  SHARDALG_SIMD_DISPATCH(gelu_grad_mul_n(h, da, dh, n));
  for (std::int64_t i = 0; i < n; ++i) dh[i] = scalar::opaque(da[i] * scalar::gelu_tanh_grad(h[i]));
}

}  // namespace shardalg::simd
