// shardalg/autodiff/elementwise.hpp — elementwise and row-wise ops, differentiable.
//
//   op                     forward                          backward (cotangent layouts per §5a)
//   hadamard(a, b)         A ⊙ B (same layout; P ⊙ R)       dA = dC ⊙ B, dB = dC ⊙ A
//   add_bias(x, b)         X + 1·b                          dX = dY, db = col_sum(dY)
//   map(x, f, df)          f(X) (not on Partial: E110)      dX = dY ⊙ f'(X)
//   softmax_rows(x)        Y = softmax(X) per row           dX = Y ⊙ (dY − rowsum(dY ⊙ Y))
//   col_sum(x), row_sum(x) Σ over rows / columns            dX = dY broadcast back
//   sum<To>(x)             Σ of every element, 1×1 [To]     dX = ds broadcast (R: per rank, I: whole)
//   dropout(x, …)          X ⊙ mask / (1 − p), keyed by     dX = dY ⊙ mask / (1 − p), the same mask
//                          the global index
//
// Each backward is local and linear in the cotangent, so it runs on a Partial cotangent summand
// by summand (an R value's cotangent is Partial): dY[Partial] ⊙ Y[R] → Partial = cot(R), and so on.
// Every layout check is the core op's: an invalid combination is the core's compile error.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "shardalg/autodiff/collectives.hpp"
#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/collective/sum.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/nn/layers/dropout.hpp"
#include "shardalg/backend/cpu/kernels.hpp"

namespace shardalg::ad {

/// a ⊙ b.
template <class T, class LA, class LB, class B>
auto hadamard(const Var<T, LA, B>& a, const Var<T, LB, B>& b) {
  auto c = shardalg::hadamard(a.value(), b.value());
  if constexpr (std::is_same_v<decltype(c), InvalidOperation>) {
    return c;
  } else {
    using LC = typename decltype(c)::layout;
    return detail::record<T, LC, B>(
        std::move(c),
        [ha = a.handle(), hb = b.handle(), pa = a.shared(), pb = b.shared()](Tape& t, const auto& dc) {
          if (ha.tracked()) t.accumulate(ha, shardalg::hadamard(dc, *pb));
          if (hb.tracked()) t.accumulate(hb, shardalg::hadamard(dc, *pa));
        },
        a, b);
  }
}

/// x + 1·b (b[1, K] broadcast over the rows): db = col_sum(dY).
template <class T, class LX, class LB, class B>
auto add_bias(const Var<T, LX, B>& x, const Var<T, LB, B>& b) {
  auto y = shardalg::add_bias(x.value(), b.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, LX, B>(
        std::move(y),
        [hx = x.handle(), hb = b.handle()](Tape& t, const auto& dy) {
          t.accumulate(hx, dy);
          if (hb.tracked()) t.accumulate(hb, col_sum(dy));
        },
        x, b);
  }
}

/// f(x) elementwise with its derivative f': dX = dY ⊙ f'(X). f and df are functors (the core's
/// `map` takes them: a CUDA backend needs them device-callable, see backend/activation.hpp).
template <class T, class L, class B, class F, class DF>
auto map(const Var<T, L, B>& x, F f, DF df) {
  auto y = shardalg::map(x.value(), f);
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, L, B>(
        std::move(y),
        [hx = x.handle(), px = x.shared(), df](Tape& t, const auto& dy) {
          const auto d = shardalg::map(*px, df);  // f'(X)[L]
          t.accumulate(hx, shardalg::hadamard(dy, d));
        },
        x);
  }
}
/// A function and its derivative, for map(x, fn).
template <class F, class DF>
struct Differentiable {
  F f;
  DF df;
};
template <class T, class L, class B, class F, class DF>
auto map(const Var<T, L, B>& x, const Differentiable<F, DF>& fn) {
  return map(x, fn.f, fn.df);
}
/// The activations of backend/activation.hpp with their derivatives.
inline constexpr Differentiable<nn::GeluTanh, nn::GeluTanhGrad> gelu{};
inline constexpr Differentiable<nn::GeluErf, nn::GeluErfGrad> gelu_erf{};
/// SiLU x·σ(x) and its derivative σ(x)(1 + x(1 − σ(x))).
struct Silu {
  static constexpr bool device_callable = true;
  template <class V>
  SHARDALG_HD V operator()(V x) const {
    return x / (V(1) + fn::exp_of(-x));
  }
};
struct SiluGrad {
  static constexpr bool device_callable = true;
  template <class V>
  SHARDALG_HD V operator()(V x) const {
    const V s = V(1) / (V(1) + fn::exp_of(-x));
    return s * (V(1) + x * (V(1) - s));
  }
};
inline constexpr Differentiable<Silu, SiluGrad> silu{};

/// SwiGLU on the fused [gate | up] block of each rank (the layout of nn::Mlp's fc1 under
/// SwiGLU: every rank holds its gate and up columns side by side): silu(gate) ⊙ up.
template <class T, class L, class B>
Var<T, L, B> swiglu(const Var<T, L, B>& h) {
  require<Diag::nonlinear_partial, !std::is_same_v<L, Partial>, L>();
  const Index half = h.cols() / 2;
  using K = nn::Kernels<B>;
  Sharded<T, L, B> a(K::swiglu(h.value().local()), h.rows(), half, h.group());
  return detail::record<T, L, B>(
      std::move(a),
      [hh = h.handle(), ph = h.shared()](Tape& t, const auto& da) {
        using CL = cot_t<L>;
        t.accumulate(hh, Sharded<T, CL, B>(K::swiglu_grad(ph->local(), da.local()), ph->rows(), ph->cols(), ph->group()));
      },
      h);
}

/// Softmax over each row (R, Row or I: whole rows on every rank): dX = Y ⊙ (dY − rowsum(dY ⊙ Y)),
/// linear in dY, so a Partial cotangent (of an R value) is handled summand by summand.
template <class T, class L, class B>
auto softmax_rows(const Var<T, L, B>& x) {
  auto y = shardalg::softmax_rows(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    auto py = std::make_shared<const Sharded<T, L, B>>(y);
    if (Tape* t = detail::tape_of(x)) t->note(py, static_cast<std::size_t>(py->local().size()) * sizeof(T));
    return detail::record<T, L, B>(
        std::move(y),
        [hx = x.handle(), py](Tape& t, const auto& dy) {
          using CL = cot_t<L>;
          const auto& Y = py->local();
          typename B::template matrix<T> dyy = dy.local().cwiseProduct(Y);
          typename B::template matrix<T> s = dyy.rowwise().sum();
          typename B::template matrix<T> dx = dyy - (Y.array().colwise() * s.col(0).array()).matrix();
          t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), py->rows(), py->cols(), py->group()));
        },
        x);
  }
}

/// Σ_i X[i, :] → [1, K] (Row → Partial: each rank its rows): dX[i, :] = dY for every row.
template <class T, class L, class B>
auto col_sum(const Var<T, L, B>& x) {
  auto y = shardalg::col_sum(x.value());
  using LY = typename decltype(y)::layout;
  return detail::record<T, LY, B>(
      std::move(y),
      [hx = x.handle(), rows = x.value().local_rows(), x_rows = x.rows(), x_cols = x.cols(), g = x.group()](
          Tape& t, const auto& dy) {
        using CL = cot_t<L>;
        typename B::template matrix<T> dx = dy.local().replicate(rows, 1);
        t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), x_rows, x_cols, g));
      },
      x);
}

/// Σ_k X[:, k] → [I, 1] (C → Partial): dX[:, k] = dY for every column.
template <class T, class L, class B>
auto row_sum(const Var<T, L, B>& x) {
  auto y = shardalg::row_sum(x.value());
  using LY = typename decltype(y)::layout;
  return detail::record<T, LY, B>(
      std::move(y),
      [hx = x.handle(), cols = x.value().local_cols(), x_rows = x.rows(), x_cols = x.cols(), g = x.group()](
          Tape& t, const auto& dy) {
        using CL = cot_t<L>;
        typename B::template matrix<T> dx = dy.local().replicate(1, cols);
        t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), x_rows, x_cols, g));
      },
      x);
}

/// Σ of this rank's block, 1×1 [Partial] (its summand of the sum): dX = ds broadcast (ds is R).
template <class T, class L, class B>
Var<T, Partial, B> partial_sum(const Var<T, L, B>& x) {
  static_assert(!WholeLayout<L>, "partial_sum: a whole (R, I) value's sum is local: use sum(x)");
  auto s = B::row_sum(B::col_sum(x.value().local()));
  return detail::record<T, Partial, B>(
      Sharded<T, Partial, B>(std::move(s), 1, 1, x.group()),
      [hx = x.handle(), lr = x.value().local_rows(), lc = x.value().local_cols(), r = x.rows(), c = x.cols(),
       g = x.group()](Tape& t, const auto& ds) {
        using CL = cot_t<L>;
        typename B::template matrix<T> dx = Mat<T, B>::Constant(lr, lc, ds.local()(0, 0));
        t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), r, c, g));
      },
      x);
}

/// Σ of every element, 1×1 [To] (To = R, or I for a loss every rank then uses redundantly).
///   X[R] → s[R] and X[I] → s[I] locally (To must then be X's own layout);
///   X[Row], X[C], X[Partial] → local sums (Partial) → all_reduce<To>: the collective is the
///   recorded all_reduce, whose adjoint (all_reduce for To = R, identity for To = I) is derived.
template <WholeLayout To = Replicated, class T, class L, class B>
auto sum(const Var<T, L, B>& x) {
  if constexpr (WholeLayout<L>) {
    require<Diag::invariant_mix, std::is_same_v<To, L> || std::is_same_v<To, Replicated>, To, L>();
    auto s = shardalg::sum(x.value());  // [L]
    return detail::record<T, L, B>(
        std::move(s),
        [hx = x.handle(), r = x.rows(), c = x.cols(), g = x.group()](Tape& t, const auto& ds) {
          using CL = cot_t<L>;
          typename B::template matrix<T> dx = Mat<T, B>::Constant(r, c, ds.local()(0, 0));
          t.accumulate(hx, Sharded<T, CL, B>(std::move(dx), r, c, g));
        },
        x);
  } else {
    return ad::all_reduce<To>(partial_sum(x));
  }
}

/// Dropout keyed by the global index (seed, tensor, row_base + global row, global column), so a
/// value's mask is the same at every TP size and in every layout; the backward applies the same
/// mask. row_base: a data-parallel replica's first token in the global batch (nn::Dropout's).
template <class T, class L, class B>
Var<T, L, B> dropout(const Var<T, L, B>& x, double p, std::uint64_t seed, std::uint64_t tensor, Index row_base = 0) {
  require<Diag::nonlinear_partial, !std::is_same_v<L, Partial>, L>();
  using K = nn::Kernels<B>;
  const auto& v = x.value();
  if (p == 0.0) return x;
  Sharded<T, L, B> y(K::template dropout<T>(v.local(), p, seed, tensor, row_base + v.row_offset(), v.col_offset()),
                     v.rows(), v.cols(), v.group());
  return detail::record<T, L, B>(
      std::move(y),
      [hx = x.handle(), p, seed, tensor, r0 = row_base + v.row_offset(), c0 = v.col_offset()](Tape& t, const auto& dy) {
        using CL = cot_t<L>;
        t.accumulate(hx, Sharded<T, CL, B>(K::template dropout<T>(dy.local(), p, seed, tensor, r0, c0), dy.rows(),
                                           dy.cols(), dy.group()));
      },
      x);
}

/// The same with an nn::Dropout's probability, seed, tensor and row base (the hand-written layers'
/// masks, exactly).
template <class T, class L, class B>
Var<T, L, B> dropout(const Var<T, L, B>& x, const nn::Dropout& d) {
  return dropout(x, d.p, d.seed, d.tensor, d.row_base);
}

}  // namespace shardalg::ad
