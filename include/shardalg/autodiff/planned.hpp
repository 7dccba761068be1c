// shardalg/autodiff/planned.hpp — matmul<To>(a, b), differentiable: the planner's chains on the
// operands, the local product and the chain on the result (plan/matmul.hpp), each step recorded
// as its differentiable op, so the backward is the steps' adjoints in reverse and the product's
// local backward (autodiff/algebra.hpp).
//
//   ad::matmul<Replicated>(h[C], w[Row])   H[C]·W[Row] → Partial; all_reduce → R
//     backward: all_reduce's adjoint (all_reduce of the Partial cotangent), then the local products
//
// The plan is chosen at run time; its layouts are dispatched to the typed steps (4 × 4 local
// products at most, each chain ≤ 2 steps). Operands are plain values (no transpose views).
#pragma once

#include <type_traits>

#include "shardalg/autodiff/collectives.hpp"
#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/plan/matmul.hpp"

namespace shardalg::ad {

template <class To, class T, class LA, class LB, class B>
auto matmul(const Var<T, LA, B>& a, const Var<T, LB, B>& b, const plan::Model& model = {}) {
  if constexpr (!Layout<To> || std::is_same_v<To, Invariant>) {
    return diagnose<Diag::plan_target, To>();
  } else if constexpr (std::is_same_v<LA, Invariant> || std::is_same_v<LB, Invariant>) {
    return diagnose<Diag::invariant_mix, LA>();
  } else {
    const plan::MatmulPlan pl = shardalg::matmul_plan<To>(a.value(), b.value(), model);
    return shardalg::detail::with_layout(pl.product.a, [&](auto la) {
      return shardalg::detail::with_layout(pl.product.b, [&](auto lb) {
        using A2 = decltype(la);
        using B2 = decltype(lb);
        if constexpr (!matmul_rule(A2::kind, B2::kind).valid) {
          throw AutodiffError("ad::matmul<To>: the plan's local product is not a valid rule (internal)");
          return Var<T, To, B>{};
        } else {
          const auto a2 = detail::run_chain<A2>(a, pl.pre_a);
          const auto b2 = detail::run_chain<B2>(b, pl.pre_b);
          return detail::run_chain<To>(ad::matmul(a2, b2), pl.post);
        }
      });
    });
  }
}

}  // namespace shardalg::ad
