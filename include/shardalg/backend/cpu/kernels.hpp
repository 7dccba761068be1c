// shardalg/backend/cpu/kernels.hpp — Kernels<CpuBackend>: the contract of backend/kernels.hpp on
// Eigen blocks; float norm rows through backend/cpu/simd_rows.hpp (one set of bits on every ISA
// path), attention in query tiles that skip the masked ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cpu/simd.hpp"
#include "shardalg/backend/cpu/simd_rows.hpp"
#include "shardalg/backend/kernels.hpp"
#include "shardalg/base/functors.hpp"  // fn::exp_of, fn::sqrt_of
#include "shardalg/backend/random.hpp"

namespace shardalg::nn {

template <>
struct Kernels<CpuBackend> {
  template <class T>
  using M = CpuBackend::matrix<T>;

  template <class T, class F>
  static M<T> generate(Index r, Index c, F f) {
    M<T> m(r, c);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < c; ++j) m(i, j) = f(i, j);
    return m;
  }

  /// dst[r0 : r0 + src.rows, c0 : c0 + src.cols] := src.
  template <class T>
  static void place(M<T>& dst, Index r0, Index c0, const M<T>& src) {
    dst.block(r0, c0, src.rows(), src.cols()) = src;
  }

  /// A 16-bit block widened to fp32: the unfused kernels below compute a 16-bit T in fp32 and
  /// round each output once, as every other CpuBackend kernel does.
  template <class T>
  static M<compute_t<T>> wide(const M<T>& m) {
    return m.template cast<compute_t<T>>();
  }

  // ---- normalisation: center = true is LayerNorm, false is RMSNorm --------------------------

  // float rows go through backend/cpu/simd_rows.hpp (fixed-order sums, AVX2 or scalar with the same
  // bits, whatever the build's flags); double through Eigen's expressions.

  /// [rows, 2] = (mean, variance) of each whole row, two passes; for RMSNorm (0, mean square).
  template <class T>
  static M<T> row_mean_var(const M<T>& x, bool center) {
    if constexpr (NarrowStorage<T>) {
      return row_mean_var<compute_t<T>>(wide(x), center).template cast<T>();  // fp32, rounded once
    } else {
      const Index n = x.cols();
      M<T> mv(x.rows(), 2);
      for (Index i = 0; i < x.rows(); ++i) {
        const auto [mean, var] = row_stats(x.data() + i * n, n, center);
        mv(i, 0) = mean;
        mv(i, 1) = var;
      }
      return mv;
    }
  }

  /// (mean, variance) of one whole row of n values: Σx/n, then Σ(x − mean)²/n; RMSNorm (0, Σx²/n).
  template <class T>
  static std::pair<T, T> row_stats(const T* x, Index n, bool center) {
    if constexpr (std::is_same_v<T, float>) {
      const float mean = center ? simd::sum(x, n) / float(n) : 0.0f;
      return {mean, simd::sum_sq_dev(x, mean, n) / float(n)};
    } else {
      const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> r(x, n);
      const T mean = center ? r.sum() / T(n) : T(0);
      return {mean, (r - mean).square().sum() / T(n)};
    }
  }

  /// [rows, 2] = (Σ_k x_k, Σ_k x_k²) over this block's columns: a summand of the row's sums.
  template <class T>
  static M<T> row_power_sums(const M<T>& x) {
    if constexpr (NarrowStorage<T>) {
      return row_power_sums<compute_t<T>>(wide(x)).template cast<T>();  // fp32 sums, rounded once
    } else {
      M<T> s(x.rows(), 2);
      s.col(0) = x.rowwise().sum();
      s.col(1) = x.array().square().rowwise().sum().matrix();
      return s;
    }
  }

  /// (Σx, Σx²) over n columns → (mean, variance) (RMSNorm: (0, mean square)).
  template <class T>
  static M<T> mean_var_from_sums(const M<T>& s, Index n, bool center) {
    if constexpr (NarrowStorage<T>) {
      return mean_var_from_sums<compute_t<T>>(wide(s), n, center).template cast<T>();
    } else {
      M<T> mv(s.rows(), 2);
      for (Index i = 0; i < s.rows(); ++i) {
        const T mean = center ? s(i, 0) / T(n) : T(0);
        mv(i, 0) = mean;
        mv(i, 1) = s(i, 1) / T(n) - mean * mean;
      }
      return mv;
    }
  }

  template <class T>
  struct NormOut {
    M<T> y, xhat, rstd;  // rstd: [rows, 1]
  };

  /// x̂ = (x − mean)·rstd, rstd = 1/√(var + eps); y = x̂ ⊙ γ (+ β when given).
  template <class T>
  static NormOut<T> norm_apply(const M<T>& x, const M<T>& mv, const M<T>& gamma, const M<T>* beta, T eps) {
    if constexpr (NarrowStorage<T>) {  // fp32 from the stored statistics; y, x̂ and rstd rounded once
      const M<compute_t<T>> bf = beta ? wide(*beta) : M<compute_t<T>>();
      const auto o = norm_apply<compute_t<T>>(wide(x), wide(mv), wide(gamma), beta ? &bf : nullptr, static_cast<compute_t<T>>(eps));
      return {o.y.template cast<T>(), o.xhat.template cast<T>(), o.rstd.template cast<T>()};
    } else {
      NormOut<T> o{M<T>(x.rows(), x.cols()), M<T>(x.rows(), x.cols()), M<T>(x.rows(), 1)};
      for (Index i = 0; i < x.rows(); ++i) {
        // T(√…): T(1) / float would pick Eigen's bfloat16 / Index
        const T rstd = T(1) / T(fn::sqrt_of(mv(i, 1) + eps));
        o.rstd(i, 0) = rstd;
        norm_row(o, i, x, mv(i, 0), rstd, gamma, beta);
      }
      return o;
    }
  }

  /// Row i of norm_apply: x̂ = (x − mean)·rstd, y = x̂ ⊙ γ (+ β) (float: simd::norm_row, one fma).
  template <class T>
  static void norm_row(NormOut<T>& o, Index i, const M<T>& x, T mean, T rstd, const M<T>& gamma, const M<T>* beta) {
    if constexpr (std::is_same_v<T, float>) {
      const Index n = x.cols();
      simd::norm_row(x.data() + i * n, mean, rstd, gamma.data(), beta ? beta->data() : nullptr, o.xhat.data() + i * n,
                     o.y.data() + i * n, n);
    } else {
      o.xhat.row(i) = (x.row(i).array() - mean) * rstd;
      o.y.row(i) = o.xhat.row(i).cwiseProduct(gamma.row(0));
      if (beta) o.y.row(i) += beta->row(0);
    }
  }

  /// [rows, 2] = (Σ_k g_k, Σ_k g_k·x̂_k) over this block's columns, g = dy ⊙ γ.
  template <class T>
  static M<T> norm_grad_sums(const M<T>& dy, const M<T>& xhat, const M<T>& gamma) {
    if constexpr (NarrowStorage<T>) {
      return norm_grad_sums<compute_t<T>>(wide(dy), wide(xhat), wide(gamma)).template cast<T>();
    } else {
      M<T> s(dy.rows(), 2);
      for (Index i = 0; i < dy.rows(); ++i) {
        const auto [s0, s1] = grad_row_sums(dy, xhat, gamma, i);
        s(i, 0) = s0;
        s(i, 1) = s1;
      }
      return s;
    }
  }

  /// Row i of norm_grad_sums: (Σ g, Σ g·x̂), g = dy ⊙ γ.
  template <class T>
  static std::pair<T, T> grad_row_sums(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, Index i) {
    const Index n = dy.cols();
    if constexpr (std::is_same_v<T, float>) {
      float s0, s1;
      simd::norm_grad_sums(dy.data() + i * n, gamma.data(), xhat.data() + i * n, n, s0, s1);
      return {s0, s1};
    } else {
      const auto g = (dy.row(i).array() * gamma.row(0).array()).eval();
      return {g.sum(), (g * xhat.row(i).array()).sum()};
    }
  }

  /// dx = rstd·(g − Σg/n − x̂·Σ(g·x̂)/n) for LayerNorm; RMSNorm drops the Σg/n term.
  template <class T>
  static M<T> norm_grad_apply(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd,
                              const M<T>& sums, Index n, bool center) {
    if constexpr (NarrowStorage<T>) {
      return norm_grad_apply<compute_t<T>>(wide(dy), wide(xhat), wide(gamma), wide(rstd), wide(sums), n, center).template cast<T>();
    } else {
      M<T> dx(dy.rows(), dy.cols());
      for (Index i = 0; i < dy.rows(); ++i) {
        const T mg = center ? sums(i, 0) / T(n) : T(0);
        const T mgx = sums(i, 1) / T(n);
        grad_row(dx, i, dy, xhat, gamma, mg, mgx, rstd(i, 0));
      }
      return dx;
    }
  }

  /// Row i of norm_grad_apply, given mg = Σg/n (0 for RMSNorm) and mgx = Σg·x̂/n; with a residual
  /// cotangent R, row i of R + dX (dX rounded, then added: the unfused add's bits).
  template <class T>
  static void grad_row(M<T>& dx, Index i, const M<T>& dy, const M<T>& xhat, const M<T>& gamma, T mg, T mgx, T rstd,
                       const M<T>* residual = nullptr) {
    if constexpr (std::is_same_v<T, float>) {
      const Index n = dy.cols();
      simd::norm_grad_row(dy.data() + i * n, gamma.data(), xhat.data() + i * n, mg, mgx, rstd,
                          residual ? residual->data() + i * n : nullptr, dx.data() + i * n, n);
    } else {
      dx.row(i) = ((dy.row(i).array() * gamma.row(0).array() - mg - xhat.row(i).array() * mgx) * rstd).matrix();
      if (residual) dx.row(i) = residual->row(i) + dx.row(i);  // stored, then added: no contraction
    }
  }

  // ---- SwiGLU: a [rows, 2w] block [gate | up] → silu(gate) ⊙ up, [rows, w] --------------------

  template <class T>
  static M<T> swiglu(const M<T>& h) {
    if constexpr (NarrowStorage<T>) {
      return swiglu<compute_t<T>>(wide(h)).template cast<T>();  // fp32, rounded once
    } else {
      const Index w = h.cols() / 2;
      M<T> a(h.rows(), w);
      for (Index i = 0; i < h.rows(); ++i)
        for (Index j = 0; j < w; ++j) {
          const T g = h(i, j);
          a(i, j) = g / (T(1) + fn::exp_of(-g)) * h(i, w + j);
        }
      return a;
    }
  }

  /// d[gate | up] from dA: d up = dA·silu(g); d gate = dA·up·σ(g)·(1 + g·(1 − σ(g))).
  template <class T>
  static M<T> swiglu_grad(const M<T>& h, const M<T>& da) {
    if constexpr (NarrowStorage<T>) {
      return swiglu_grad<compute_t<T>>(wide(h), wide(da)).template cast<T>();
    } else {
      const Index w = h.cols() / 2;
      M<T> dh(h.rows(), h.cols());
      for (Index i = 0; i < h.rows(); ++i)
        for (Index j = 0; j < w; ++j) {
          const T g = h(i, j), u = h(i, w + j);
          const T sig = T(1) / (T(1) + fn::exp_of(-g));
          dh(i, w + j) = da(i, j) * g * sig;
          dh(i, j) = da(i, j) * u * sig * (T(1) + g * (T(1) - sig));
        }
      return dh;
    }
  }

  // ---- dropout keyed by the global index -------------------------------------------------------

  /// y = x ⊙ mask / (1 − p), mask(i, j) = [uniform(seed, tensor, r0 + i, c0 + j) ≥ p].
  template <class T>
  static M<T> dropout(const M<T>& x, double p, std::uint64_t seed, std::uint64_t tensor, Index r0, Index c0) {
    if constexpr (NarrowStorage<T>) {  // the scale in fp32, each kept value rounded once
      return dropout<compute_t<T>>(x.template cast<compute_t<T>>(), p, seed, tensor, r0, c0).template cast<T>();
    } else {
      const T scale = static_cast<T>(1.0 / (1.0 - p));
      M<T> y(x.rows(), x.cols());
      for (Index i = 0; i < x.rows(); ++i)
        for (Index j = 0; j < x.cols(); ++j)
          y(i, j) = dropout_uniform(seed, tensor, r0 + i, c0 + j) >= p ? x(i, j) * scale : T(0);
      return y;
    }
  }

  // ---- causal self-attention on a local fused-QKV block ----------------------------------------
  //
  // Per (sequence, head), with S = QKᵀ/√d masked to the keys c ≤ i and P = softmax(S) by rows:
  //   forward   O = P·V
  //   backward  dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS·K/√d, dK = dSᵀ·Q/√d
  // The queries go in tiles of `attn_tile` rows: tile [i0, i1) meets the keys [0, i1) only, so the
  // scores right of the diagonal tile (all masked) are never computed — at s = 512 and tiles of 64
  // the four GEMMs per head do 56 % of the full products' work. dK and dV go by key tiles
  // [k0, k1), which only the queries i ≥ k0 reach. One [s, s] scratch per call serves every head.

  /// Query (and key) rows per tile.
  static constexpr Index attn_tile = 64;

  template <class T>
  struct AttnOut {
    M<T> out;    // [tokens, units·q_per_unit·head_dim]: the heads side by side
    M<T> probs;  // [(batch·units·q_per_unit)·seq, seq]: softmax(QKᵀ/√d) per (batch, head), 0 right of the diagonal
  };

  /// drop (optional): O = (P ⊙ mask/(1 − p))·V; probs keeps P itself (the backward recomputes the mask).
  template <class T>
  static AttnOut<T> causal_attention(const M<T>& qkv, const AttnShape& s, const AttnDropout& drop = {}) {
    if constexpr (NarrowStorage<T>) {  // scores, softmax and P·V in fp32; O and P rounded once
      const auto o = attention_forward<compute_t<T>>(qkv.template cast<compute_t<T>>(), s, drop);
      return {o.out.template cast<T>(), o.probs.template cast<T>()};
    } else {
      return attention_forward<T>(qkv, s, drop);
    }
  }

  /// dQKV from dOut (the formulas above); K and V gradients are summed over the query heads of
  /// their unit. With dropout (D = mask/(1 − p), P̃ = P ⊙ D): dV = P̃ᵀ·dO, dP = (dO·Vᵀ) ⊙ D.
  template <class T>
  static M<T> causal_attention_grad(const M<T>& qkv, const M<T>& probs, const M<T>& dout, const AttnShape& s,
                                    const AttnDropout& drop = {}) {
    if constexpr (NarrowStorage<T>)  // from the stored P; every product and row sum in fp32, dQKV rounded once
      return attention_backward<compute_t<T>>(qkv.template cast<compute_t<T>>(), probs.template cast<compute_t<T>>(),
                                       dout.template cast<compute_t<T>>(), s, drop)
          .template cast<T>();
    else
      return attention_backward<T>(qkv, probs, dout, s, drop);
  }

 private:
  template <class T>
  static AttnOut<T> attention_forward(const M<T>& qkv, const AttnShape& s, const AttnDropout& drop) {
    const T scale = T(1) / fn::sqrt_of(T(s.head_dim));
    const Index d = s.head_dim, uw = s.unit_width(), n = s.seq, ow = s.out_width();
    // every element of both is written below (probs: the softmax left of the diagonal, zeros right of it)
    AttnOut<T> o{M<T>(s.batch * n, ow), M<T>(s.batch * s.units * s.q_per_unit * n, n)};
    M<T> ft, pd;  // with dropout: the factors of one tile, P ⊙ them
    for (Index b = 0; b < s.batch; ++b)
      for (Index u = 0; u < s.units; ++u) {
        const auto k = sub(qkv, b * n, u * uw + s.q_per_unit * d, n, d);
        const auto v = sub(qkv, b * n, u * uw + (s.q_per_unit + 1) * d, n, d);
        for (Index j = 0; j < s.q_per_unit; ++j) {
          const Index head = u * s.q_per_unit + j;
          const auto q = sub(qkv, b * n, u * uw + j * d, n, d);
          T* p = o.probs.data() + ((b * s.units + u) * s.q_per_unit + j) * n * n;
          T* out = o.out.data() + b * n * ow + head * d;
          for (Index i0 = 0; i0 < n; i0 += attn_tile) {
            const Index i1 = std::min(i0 + attn_tile, n), r = i1 - i0;
            // QKᵀ on the tile [i0, i1) × [0, i1); the 1/√d is applied in the softmax's pass
            CpuBackend::gemm(T(1), q.slice_rows(i0, r), transposed(k.slice_rows(0, i1)), T(0), p + i0 * n, n);
            for (Index i = i0; i < i1; ++i) {  // row i attends to keys 0..i
              softmax_prefix(p + i * n, scale, i + 1);
              std::fill(p + i * n + i + 1, p + (i + 1) * n, T(0));
            }
            MatView<T> pt{p + i0 * n, r, i1, n, false};
            if (drop.active()) {  // P̃ = P ⊙ D on the tile
              tile_factors(ft, drop, b, head, n, i0, r, i1);
              pd = Eigen::Map<const M<T>, 0, Eigen::OuterStride<>>(pt.data, r, i1, Eigen::OuterStride<>(n)).cwiseProduct(ft);
              pt = CpuBackend::view(pd);
            }
            CpuBackend::gemm(T(1), pt, v.slice_rows(0, i1), T(0), out + i0 * ow, ow);  // O = P·V
          }
        }
      }
    return o;
  }

  template <class T>
  static M<T> attention_backward(const M<T>& qkv, const M<T>& probs, const M<T>& dout, const AttnShape& s,
                                 const AttnDropout& drop) {
    const T scale = T(1) / fn::sqrt_of(T(s.head_dim));
    const Index d = s.head_dim, uw = s.unit_width(), n = s.seq, ld = qkv.cols();
    M<T> dqkv(qkv.rows(), ld);  // every column written: dQ by query tiles, dK and dV by key tiles
    if (ld != s.units * uw) dqkv.setZero();
    M<T> ds(n, n);  // dP, then dS/√d, of one head: the tiles left of the diagonal
    M<T> pd, ft;    // with dropout: P̃ of one head, the factors of one tile
    if (drop.active()) pd.resize(n, n);
    for (Index b = 0; b < s.batch; ++b)
      for (Index u = 0; u < s.units; ++u) {
        const Index r0 = b * n, kc = u * uw + s.q_per_unit * d, vc = kc + d;
        const auto k = sub(qkv, r0, kc, n, d);
        const auto v = sub(qkv, r0, vc, n, d);
        for (Index j = 0; j < s.q_per_unit; ++j) {
          const Index qc = u * uw + j * d, head = u * s.q_per_unit + j;
          const auto q = sub(qkv, r0, qc, n, d);
          const T* p = probs.data() + ((b * s.units + u) * s.q_per_unit + j) * n * n;
          const auto dO = sub(dout, r0, head * d, n, d);
          for (Index i0 = 0; i0 < n; i0 += attn_tile) {  // query tiles: dP, dS, dQ
            const Index i1 = std::min(i0 + attn_tile, n), r = i1 - i0;
            T* dst = ds.data() + i0 * n;
            CpuBackend::gemm(T(1), dO.slice_rows(i0, r), transposed(v.slice_rows(0, i1)), T(0), dst, n);  // dP
            if (drop.active()) {
              tile_factors(ft, drop, b, head, n, i0, r, i1);
              for (Index i = 0; i < r; ++i)
                for (Index c = 0; c < i1; ++c) {
                  pd(i0 + i, c) = p[(i0 + i) * n + c] * ft(i, c);
                  dst[i * n + c] *= ft(i, c);
                }
            }
            for (Index i = i0; i < i1; ++i) {  // dS/√d = P ⊙ (dP − dP·P)/√d on the keys 0..i; 0 right of them
              Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> dr(ds.data() + i * n, i1);
              const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> pr(p + i * n, i1);
              T dot;
              if constexpr (std::is_same_v<T, float>) dot = simd::dot(dr.data(), pr.data(), i + 1);  // fixed order
              else dot = (dr.head(i + 1) * pr.head(i + 1)).sum();
              dr = pr * (dr - dot) * scale;
            }
            CpuBackend::gemm(T(1), MatView<T>{dst, r, i1, n, false}, k.slice_rows(0, i1), T(0),
                             dqkv.data() + (r0 + i0) * ld + qc, ld);  // dQ = dS·K/√d
          }
          const T beta = j == 0 ? T(0) : T(1);  // K and V: the unit's first head writes, the others add
          const T* pv = drop.active() ? pd.data() : p;
          for (Index k0 = 0; k0 < n; k0 += attn_tile) {  // key tiles: the queries i ≥ k0 reach them
            const Index kr = std::min(attn_tile, n - k0), rows = n - k0;
            CpuBackend::gemm(T(1), MatView<T>{ds.data() + k0 * n + k0, kr, rows, n, true}, q.slice_rows(k0, rows), beta,
                             dqkv.data() + (r0 + k0) * ld + kc, ld);  // dK = (dS/√d)ᵀ·Q
            CpuBackend::gemm(T(1), MatView<T>{pv + k0 * n + k0, kr, rows, n, true}, dO.slice_rows(k0, rows), beta,
                             dqkv.data() + (r0 + k0) * ld + vc, ld);  // dV = P̃ᵀ·dO
          }
        }
      }
    return dqkv;
  }

 private:
  /// Rows [r0, r0 + r), columns [c0, c0 + c) of a row-major block, as a GEMM operand.
  template <class T>
  static MatView<T> sub(const M<T>& m, Index r0, Index c0, Index r, Index c) {
    return {m.data() + r0 * m.cols() + c0, r, c, m.cols(), false};
  }
  template <class T>
  static MatView<T> transposed(MatView<T> v) {
    return {v.data, v.cols, v.rows, v.ld, !v.trans};
  }
  /// softmax(x·scale) of x[0 .. len) in place (scale > 0, so the largest x·scale is max(x)·scale):
  /// float through simd::exp_sum (the exponentials and their sum in one vectorised pass, the same
  /// bits on every ISA path), double through std::exp.
  template <class T>
  static void softmax_prefix(T* x, T scale, Index len) {
    const T shift = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, len).maxCoeff() * scale;
    T sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      sum = simd::exp_sum(x, scale, shift, len);
    } else {
      for (Index c = 0; c < len; ++c) {
        if constexpr (fn::OwnMath<T>) sum += (x[c] = exp(x[c] * scale - shift));  // a bound: the fma rounds less
        else sum += (x[c] = std::exp(std::fma(x[c], scale, -shift)));
      }
    }
    for (Index c = 0; c < len; ++c) x[c] /= sum;
  }
  /// mask/(1 − p) of local sequence b, local head k on the tile [i0, i0 + r) × [0, cols), 0 right of the diagonal.
  template <class T>
  static void tile_factors(M<T>& f, const AttnDropout& drop, Index b, Index k, Index seq, Index i0, Index r, Index cols) {
    f.resize(r, cols);
    for (Index i = 0; i < r; ++i)
      for (Index c = 0; c < cols; ++c) f(i, c) = c <= i0 + i ? drop.factor<T>(b, k, seq, i0 + i, c) : T(0);
  }
};

}  // namespace shardalg::nn
