// shardalg/backend/cpu/fused.hpp — Fused<CpuBackend>: the passes of backend/fused.hpp in one sweep
// of memory each, with the bits of the unfused composition (tests/unit/test_fused.cpp, both ISA
// paths). 16-bit elements (bf16, fp16) are storage only: each pass converts its operands to float
// (exactly), runs the float pass — every sum and every intermediate in fp32 — and rounds each
// output once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cpu/simd.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/backend/fused.hpp"
#include "shardalg/backend/random.hpp"

namespace shardalg::nn {

template <>
struct Fused<CpuBackend> {
  template <class T>
  using M = CpuBackend::matrix<T>;
  using K = Kernels<CpuBackend>;  // the norms' row kernels, shared with the unfused path

  template <class T>
  static M<T> bias_act(M<T>& y, const M<T>* b, Activation act) {
    if constexpr (NarrowStorage<T>) {  // y + b stored, then act(y + b): each rounded once
      M<compute_t<T>> yf = wide(y);
      const M<compute_t<T>> bf = b ? wide(*b) : M<compute_t<T>>();
      const M<compute_t<T>> af = bias_act_impl<compute_t<T>>(yf, b ? &bf : nullptr, act);
      y = narrow<T>(yf);
      return narrow<T>(af);
    } else {
      return bias_act_impl<T>(y, b, act);
    }
  }
  template <class T>
  static M<T> act_grad(const M<T>& h, M<T>&& da, Activation act, M<T>* db) {
    if constexpr (NarrowStorage<T>) {  // dh and db = Σ_rows dh in fp32, each rounded once
      M<compute_t<T>> dbf;
      const M<compute_t<T>> dhf = act_grad_impl<compute_t<T>>(wide(h), wide(da), act, db ? &dbf : nullptr);
      if (db) *db = narrow<T>(dbf);
      return narrow<T>(dhf);
    } else {
      return act_grad_impl<T>(h, std::move(da), act, db);
    }
  }

  template <class T>
  using NormOut = Kernels<CpuBackend>::NormOut<T>;
  template <class T>
  struct NormGrads {
    M<T> dx, dgamma, dbeta;
  };
  /// Kernels::row_mean_var and Kernels::norm_apply, row by row in one loop.
  template <class T>
  static NormOut<T> norm_forward(const M<T>& x, const M<T>& gamma, const M<T>* beta, T eps, bool center) {
    if constexpr (NarrowStorage<T>) {  // the statistics in fp32; y, x̂ and rstd rounded once
      const M<compute_t<T>> bf = beta ? wide(*beta) : M<compute_t<T>>();
      const auto o = norm_forward_impl<compute_t<T>>(wide(x), wide(gamma), beta ? &bf : nullptr, static_cast<compute_t<T>>(eps), center);
      return {narrow<T>(o.y), narrow<T>(o.xhat), narrow<T>(o.rstd)};
    } else {
      return norm_forward_impl<T>(x, gamma, beta, eps, center);
    }
  }
  /// Kernels::norm_grad_sums and norm_grad_apply row by row; dγ = Σ dY ⊙ x̂ and dβ = Σ dY in the
  /// same loop (ColSumOrder); R + dX row by row when a residual R is given.
  template <class T>
  static NormGrads<T> norm_backward(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd,
                                    bool center, bool want_dbeta, const M<T>* residual = nullptr) {
    if constexpr (NarrowStorage<T>) {  // the row sums and dγ, dβ in fp32; each output rounded once
      const M<compute_t<T>> rf = residual ? wide(*residual) : M<compute_t<T>>();
      const auto g = norm_backward_impl<compute_t<T>>(wide(dy), wide(xhat), wide(gamma), wide(rstd), center, want_dbeta,
                                               residual ? &rf : nullptr);
      return {narrow<T>(g.dx), narrow<T>(g.dgamma), narrow<T>(g.dbeta)};
    } else {
      return norm_backward_impl<T>(dy, xhat, gamma, rstd, center, want_dbeta, residual);
    }
  }
  /// x + dropout(z): the mask of Kernels::dropout, the add in the same pass.
  template <class T>
  static M<T> dropout_add(const M<T>& x, const M<T>& z, double p, std::uint64_t seed, std::uint64_t tensor, Index r0,
                          Index c0) {
    if constexpr (NarrowStorage<T>) return narrow<T>(dropout_add_impl<compute_t<T>>(wide(x), wide(z), p, seed, tensor, r0, c0));
    else return dropout_add_impl<T>(x, z, p, seed, tensor, r0, c0);
  }

 private:
  template <class T>
  static M<T> bias_act_impl(M<T>& y, const M<T>* b, Activation act) {
    const Index rows = y.rows(), n = y.cols();
    if (act == Activation::swiglu) return swiglu_bias(y, b);
    M<T> a(rows, n);
    for (Index i = 0; i < rows; ++i) {
      T* yr = y.data() + i * n;
      T* ar = a.data() + i * n;
      if constexpr (std::is_same_v<T, float>) {
        if (act == Activation::gelu_tanh) {
          if (b) simd::bias_gelu(yr, b->data(), yr, ar, n);
          else simd::gelu_tanh(yr, ar, n);
          continue;
        }
      }
      if (b) y.row(i) += b->row(0);  // add_row's operation, on one row
      map_row(act, y.row(i), a.row(i));
    }
    return a;
  }

  template <class T>
  static M<T> act_grad_impl(const M<T>& h, M<T>&& da, Activation act, M<T>* db) {
    if (act == Activation::swiglu) return swiglu_grad(h, da, db);
    M<T> dh = std::move(da);  // in place
    const Index rows = dh.rows(), n = dh.cols();
    auto grad_row = [&](Index i) {
      T* d = dh.data() + i * n;
      if constexpr (std::is_same_v<T, float>) {
        if (act == Activation::gelu_tanh) return simd::gelu_grad_mul(h.data() + i * n, d, d, n);
      }
      M<T> g(1, n);
      map_grad_row(act, h.row(i), g.row(0));
      for (Index j = 0; j < n; ++j) d[j] = opaque(d[j] * g(0, j));
    };
    if (!db) {
      for (Index i = 0; i < rows; ++i) grad_row(i);
      return dh;
    }
    *db = M<T>::Zero(1, n);
    const Index paired = ColSumOrder<T>::paired(n);
    ColSumOrder<T>::schedule(rows, [&](Index i0, Index k, bool first) {
      const T* r[4];
      for (Index q = 0; q < k; ++q) {
        grad_row(i0 + q);
        r[q] = dh.data() + (i0 + q) * n;
      }
      ColSumOrder<T>::add(db->data(), r, k, first, n, paired);
    });
    return dh;
  }

  template <class T>
  static NormOut<T> norm_forward_impl(const M<T>& x, const M<T>& gamma, const M<T>* beta, T eps, bool center) {
    const Index n = x.cols();
    NormOut<T> o{M<T>(x.rows(), n), M<T>(x.rows(), n), M<T>(x.rows(), 1)};
    for (Index i = 0; i < x.rows(); ++i) {
      const auto [mean, var] = K::row_stats(x.data() + i * n, n, center);
      const T rstd = T(1) / std::sqrt(var + eps);
      o.rstd(i, 0) = rstd;
      K::norm_row(o, i, x, mean, rstd, gamma, beta);
    }
    return o;
  }

  template <class T>
  static NormGrads<T> norm_backward_impl(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd,
                                         bool center, bool want_dbeta, const M<T>* residual) {
    const Index rows = dy.rows(), n = dy.cols();
    NormGrads<T> g{M<T>(rows, n), M<T>::Zero(1, n), want_dbeta ? M<T>::Zero(1, n) : M<T>()};
    M<T> prod(4, n);
    const Index paired = ColSumOrder<T>::paired(n);
    ColSumOrder<T>::schedule(rows, [&](Index i0, Index k, bool first) {
      const T *pr[4], *dr[4];
      for (Index q = 0; q < k; ++q) {
        const Index i = i0 + q;
        const auto [s0, s1] = K::grad_row_sums(dy, xhat, gamma, i);
        const T mg = center ? s0 / T(n) : T(0);
        const T mgx = s1 / T(n);
        K::grad_row(g.dx, i, dy, xhat, gamma, mg, mgx, rstd(i, 0), residual);  // R + dX in the row's sweep
        T* p = prod.data() + q * n;
        for (Index j = 0; j < n; ++j) p[j] = opaque(dy(i, j) * xhat(i, j));
        pr[q] = p;
        dr[q] = dy.data() + i * n;
      }
      ColSumOrder<T>::add(g.dgamma.data(), pr, k, first, n, paired);
      if (want_dbeta) ColSumOrder<T>::add(g.dbeta.data(), dr, k, first, n, paired);
    });
    return g;
  }

  template <class T>
  static M<T> dropout_add_impl(const M<T>& x, const M<T>& z, double p, std::uint64_t seed, std::uint64_t tensor, Index r0,
                               Index c0) {
    M<T> y(x.rows(), x.cols());
    if (p == 0.0) {
      y.noalias() = x + z;
      return y;
    }
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    for (Index i = 0; i < x.rows(); ++i)
      for (Index j = 0; j < x.cols(); ++j)
        y(i, j) = x(i, j) + (dropout_uniform(seed, tensor, r0 + i, c0 + j) >= p ? opaque(z(i, j) * scale) : T(0));
    return y;
  }

  /// A 16-bit block as float (exact) and a float block rounded to T.
  template <class T>
  static M<compute_t<T>> wide(const M<T>& m) {
    return m.template cast<compute_t<T>>();
  }
  template <class T>
  static M<T> narrow(const M<compute_t<T>>& m) {
    return m.template cast<T>();
  }
  template <class T>
  static T opaque(T v) {
    if constexpr (std::is_same_v<T, float>) return simd::scalar::opaque(v);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    else if constexpr (std::is_same_v<T, double>) {
      __asm__("" : "+x"(v));
      return v;
    }
#endif
    else return v;
  }
  template <class In, class Out>
  static void map_row(Activation act, const In& h, Out&& a) {
    if (act == Activation::gelu_tanh) a = GeluTanh{}.array(h.array()).matrix();
    else a = h.unaryExpr(GeluErf{});
  }
  template <class In, class Out>
  static void map_grad_row(Activation act, const In& h, Out&& g) {
    if (act == Activation::gelu_tanh) g = GeluTanhGrad{}.array(h.array()).matrix();
    else g = h.unaryExpr(GeluErfGrad{});
  }
  // SwiGLU on a [rows, 2w] block [gate | up]: Kernels<CpuBackend>::swiglu's and swiglu_grad's
  // expressions, one row at a time.
  template <class T>
  static void swiglu_row(const T* h, T* a, Index w) {
    for (Index j = 0; j < w; ++j) {
      const T g = h[j];
      a[j] = g / (T(1) + std::exp(-g)) * h[w + j];
    }
  }
  template <class T>
  static void swiglu_grad_row(const T* h, const T* da, T* dh, Index w) {
    for (Index j = 0; j < w; ++j) {
      const T g = h[j], u = h[w + j];
      const T sig = T(1) / (T(1) + std::exp(-g));
      dh[w + j] = da[j] * g * sig;
      dh[j] = da[j] * u * sig * (T(1) + g * (T(1) - sig));
    }
  }
  template <class T>
  static M<T> swiglu_bias(M<T>& y, const M<T>* b) {
    const Index w = y.cols() / 2;
    M<T> a(y.rows(), w);
    for (Index i = 0; i < y.rows(); ++i) {
      if (b) y.row(i) += b->row(0);
      swiglu_row(y.data() + i * 2 * w, a.data() + i * w, w);
    }
    return a;
  }
  template <class T>
  static M<T> swiglu_grad(const M<T>& h, const M<T>& da, M<T>* db) {
    const Index w = h.cols() / 2, n = 2 * w;
    M<T> dh(h.rows(), n);
    auto row = [&](Index i) { swiglu_grad_row(h.data() + i * n, da.data() + i * w, dh.data() + i * n, w); };
    if (!db) {
      for (Index i = 0; i < h.rows(); ++i) row(i);
      return dh;
    }
    *db = M<T>::Zero(1, n);
    const Index paired = ColSumOrder<T>::paired(n);
    ColSumOrder<T>::schedule(h.rows(), [&](Index i0, Index k, bool first) {
      const T* r[4];
      for (Index q = 0; q < k; ++q) {
        row(i0 + q);
        r[q] = dh.data() + (i0 + q) * n;
      }
      ColSumOrder<T>::add(db->data(), r, k, first, n, paired);
    });
    return dh;
  }
};

}  // namespace shardalg::nn
