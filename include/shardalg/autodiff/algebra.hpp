// shardalg/autodiff/algebra.hpp — the linear ops, differentiable: matmul (with transpose views),
// + − α·, and the free conversion of a cotangent to its typed layout.
//
// matmul  C = op(A) · op(B)   (op(X) = X or Xᵀ: ad::transpose(x) is a view)
//   dA = dC · op(B)ᵀ          (A under a view: dA = op(B) · dCᵀ)
//   dB = op(A)ᵀ · dC          (B under a view: dB = dCᵀ · op(A))
// Each product is local, by §3's table on the cotangent layouts; where its layout is not yet
// cot(A) (resp. cot(B)) a free conversion finishes it. The nine valid rules:
//
//   A · B → C        dC        dA                               dB
//   R · R → R        Partial   Partial · R → Partial            R · Partial → Partial
//   R · Row → P      R         R · C → C, to_partial → Partial  R · R → R, split → Row
//   R · C → C        C         C · Row → Partial                R · C → C
//   R · P → P        R         R · P → Partial                  R · R → R
//   Row · R → Row    Row       Row · R → Row                    C · Row → Partial
//   C · R → P        R         R · R → R, split → C             Row · R → Row, to_partial → Partial
//   C · Row → P      R         R · C → C                        Row · R → Row
//   P · R → P        R         R · R → R                        P · R → Partial
//   I · I → I        I         I · I → I                        I · I → I
//
// So a matmul's backward never communicates: the collectives of a derived backward are the
// adjoints of the forward's redistributions (autodiff/collectives.hpp).
#pragma once

#include <type_traits>
#include <utility>

#include "shardalg/autodiff/tape.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/plan/redistribute.hpp"

namespace shardalg::ad {

namespace detail {
template <class...>
inline constexpr bool always_false = false;

/// A cotangent computed in layout Got, as the layout Want the table asks for: the same, or a free
/// conversion (to_partial from R, Row, C; split from R to Row or C).
template <Layout Want, class T, class Got, class B>
Sharded<T, Want, B> to_cot(Sharded<T, Got, B> x) {
  if constexpr (std::is_same_v<Want, Got>) {
    return x;
  } else if constexpr (std::is_same_v<Want, Partial> && !std::is_same_v<Got, Invariant>) {
    return to_partial(x);
  } else if constexpr (std::is_same_v<Got, Replicated> && SplitLayout<Want>) {
    return split<Want>(x);
  } else {
    static_assert(always_false<Want, Got>, "ad: no free conversion of a cotangent (internal)");
  }
}
}  // namespace detail

/// op(x) = xᵀ as a matmul operand (a view: nothing is copied).
template <class T, class L, class B>
struct TransposedVar {
  const Var<T, L, B>* of;
};
template <class T, class L, class B>
TransposedVar<T, L, B> transpose(const Var<T, L, B>& x) {
  return {&x};
}

namespace detail {
template <class X>
struct ad_operand;
template <class T, class L, class B>
struct ad_operand<Var<T, L, B>> {
  using var = Var<T, L, B>;
  static constexpr bool trans = false;
  static const var& of(const var& x) { return x; }
  static const Sharded<T, L, B>& value(const var& x) { return x.value(); }
};
template <class T, class L, class B>
struct ad_operand<TransposedVar<T, L, B>> {
  using var = Var<T, L, B>;
  static constexpr bool trans = true;
  static const var& of(const TransposedVar<T, L, B>& x) { return *x.of; }
  static auto value(const TransposedVar<T, L, B>& x) { return shardalg::transpose(x.of->value()); }
};
/// The operand as the core's matmul takes it: X or Xᵀ (a view) of the value.
template <bool Trans, class S>
decltype(auto) op(const S& x) {
  if constexpr (Trans) return shardalg::transpose(x);
  else return (x);  // a reference: no copy
}
}  // namespace detail

template <class X>
concept AdOperand = requires { typename detail::ad_operand<std::remove_cvref_t<X>>::var; };

/// C = op(A) · op(B), the core's local product (its rule table and diagnostics); backward as above.
template <AdOperand A, AdOperand Bo>
auto matmul(const A& a, const Bo& b) {
  using OA = detail::ad_operand<std::remove_cvref_t<A>>;
  using OB = detail::ad_operand<std::remove_cvref_t<Bo>>;
  auto c = shardalg::matmul(OA::value(a), OB::value(b));
  if constexpr (std::is_same_v<decltype(c), InvalidOperation>) {
    return c;  // the core's diagnostic has fired
  } else {
    using VA = typename OA::var;
    using VB = typename OB::var;
    using T = typename VA::value_type;
    using Bk = typename VA::backend;
    using LC = typename decltype(c)::layout;
    const VA& va = OA::of(a);
    const VB& vb = OB::of(b);
    return detail::record<T, LC, Bk>(
        std::move(c),
        [ha = va.handle(), hb = vb.handle(), pa = va.shared(), pb = vb.shared()](Tape& t, const auto& dc) {
          constexpr bool ta = OA::trans, tb = OB::trans;
          if (ha.tracked()) {
            // dA = dC · op(B)ᵀ, or op(B) · dCᵀ when A is under a view.
            auto da = [&] {
              if constexpr (!ta) return shardalg::matmul(dc, detail::op<!tb>(*pb));
              else return shardalg::matmul(detail::op<tb>(*pb), shardalg::transpose(dc));
            }();
            t.accumulate(ha, detail::to_cot<cot_t<typename VA::layout>>(std::move(da)));
          }
          if (hb.tracked()) {
            // dB = op(A)ᵀ · dC, or dCᵀ · op(A) when B is under a view.
            auto db = [&] {
              if constexpr (!tb) return shardalg::matmul(detail::op<!ta>(*pa), dc);
              else return shardalg::matmul(shardalg::transpose(dc), detail::op<ta>(*pa));
            }();
            t.accumulate(hb, detail::to_cot<cot_t<typename VB::layout>>(std::move(db)));
          }
        },
        va, vb);
  }
}

/// a + b (the same layout; Partial + Partial too): both get dC.
template <class T, class LA, class LB, class B>
auto operator+(const Var<T, LA, B>& a, const Var<T, LB, B>& b) {
  auto c = a.value() + b.value();
  if constexpr (std::is_same_v<decltype(c), InvalidOperation>) {
    return c;
  } else {
    return detail::record<T, LA, B>(
        std::move(c),
        [ha = a.handle(), hb = b.handle()](Tape& t, const auto& dc) {
          t.accumulate(ha, dc);
          t.accumulate(hb, dc);
        },
        a, b);
  }
}

/// a − b: dA = dC, dB = −dC.
template <class T, class LA, class LB, class B>
auto operator-(const Var<T, LA, B>& a, const Var<T, LB, B>& b) {
  auto c = a.value() - b.value();
  if constexpr (std::is_same_v<decltype(c), InvalidOperation>) {
    return c;
  } else {
    return detail::record<T, LA, B>(
        std::move(c),
        [ha = a.handle(), hb = b.handle()](Tape& t, const auto& dc) {
          t.accumulate(ha, dc);
          if (hb.tracked()) t.accumulate(hb, T(-1) * dc);
        },
        a, b);
  }
}

/// α · a: dA = α · dC.
template <class S, class T, class L, class B>
  requires ScalarFor<S, T>
Var<T, L, B> operator*(S alpha, const Var<T, L, B>& a) {
  const T al = static_cast<T>(alpha);
  return detail::record<T, L, B>(
      al * a.value(), [ha = a.handle(), al](Tape& t, const auto& dc) { t.accumulate(ha, al * dc); }, a);
}
template <class S, class T, class L, class B>
  requires ScalarFor<S, T>
Var<T, L, B> operator*(const Var<T, L, B>& a, S alpha) {
  return alpha * a;
}

}  // namespace shardalg::ad
