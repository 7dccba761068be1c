// shardalg/plan/matmul.hpp — matmul<To>(a, b): the product in a requested layout, with the
// collectives that get it there inserted at compile time and picked by cost at run time.
//
//   matmul<Replicated>(H[C], W[Row])    H[C]·W[Row] → Z[Partial]; all_reduce Z[Partial] → Z[R]
//   matmul<ColSharded>(X[R], W[C])      X[R]·W[C] → Y[C]                       (no collective)
//   matmul<RowSharded>(A[Row], B[Row])  all_gather B[Row] → B[R]; A[Row]·B[R] → C[Row]
//
// The candidates are fixed at compile time (plan/plan.hpp: every valid local product with every
// chain of ≤ 2 steps on each operand and on the result); the pick among them is made at run time
// from the global shapes, the group size, the element size and the cost model — the same on
// every rank, so every rank runs the same collectives. The executor moves blocks whose layout is
// a run-time value through the typed collectives, so a call site costs a few instantiations.
// `matmul_plan<To>(a, b)` returns the plan without running it. Plain `matmul(a, b)` stays local.
//
// Backward: adjoint::matmul(a, b, dc) gives the cotangents of a and b (of the tensors under a
// transpose view) in their cotangent layouts (base/layout.hpp: Row → Row, C → C, R → R,
// Partial → R), each as a planned product: dA = matmul<cot A>(dC, op(B)ᵀ), dB = matmul<cot B>(op(A)ᵀ, dC).
// For the Megatron MLP this is the hand-written backward: one all_reduce (f's adjoint).
#pragma once

#include <type_traits>

#include "shardalg/core/matmul.hpp"
#include "shardalg/plan/redistribute.hpp"

namespace shardalg {

namespace detail {

template <class X>
using operand_t = operand<std::remove_cvref_t<X>>;

// The executor works on blocks whose layout is a run-time value, so that matmul<To> compiles
// to a handful of instantiations per element type and backend (the 12 steps, one local product)
// instead of one per candidate plan and call site. Each step still runs the typed, named
// collective (plan/redistribute.hpp: step<To>), so the ledger sees exactly what an explicit
// call would record.

/// A block on its way through a plan: owned after a step; before any, borrowed from the operand.
template <class T, class B>
struct Moving {
  using matrix = typename B::template matrix<T>;
  const matrix* borrowed = nullptr;
  matrix owned{};
  Index rows = 0, cols = 0;
  LayoutKind kind = LayoutKind::replicated;
  Group group{};
  [[nodiscard]] const matrix& local() const { return borrowed ? *borrowed : owned; }
};

template <class T, class L, class B>
Moving<T, B> owning(Sharded<T, L, B>&& x) {
  const Index r = x.rows(), c = x.cols();
  Group g = x.group();
  return {nullptr, std::move(x).local(), r, c, L::kind, std::move(g)};
}

/// One step of an owned block to layout `to` (instantiated once per T, B).
template <class T, class B>
Moving<T, B> step_to(Moving<T, B>&& x, LayoutKind to) {
  return with_layout(x.kind, [&](auto from) {
    using From = decltype(from);
    const Sharded<T, From, B> typed(std::move(x.owned), x.rows, x.cols, std::move(x.group));
    return with_layout(to, [&](auto target) { return owning(step<decltype(target)>(typed)); });
  });
}

/// A chain on an operand: the first step from the typed tensor (no copy of the operand), the
/// rest on owned blocks. No step: the operand's block, borrowed.
template <class T, class L, class B>
Moving<T, B> run_chain_on(const Sharded<T, L, B>& x, const plan::Chain& c) {
  if (c.steps == 0) return {&x.local(), {}, x.rows(), x.cols(), L::kind, x.group()};
  Moving<T, B> m = with_layout(c.at[1], [&](auto target) { return owning(step<decltype(target)>(x)); });
  for (int i = 1; i < c.steps; ++i) m = step_to(std::move(m), c.at[static_cast<std::size_t>(i) + 1]);
  return m;
}

/// The chain of an operand run on the result's handle `g` (detail::result_group). When only the
/// other operand's handle carries a ledger, the operand is rebound to `g` first, so that the
/// ledger records its steps too; that copies the operand's block, and only in this mixed case.
template <class T, class L, class B>
Moving<T, B> run_chain_on(const Sharded<T, L, B>& x, const plan::Chain& c, const Group& g) {
  const bool rebind = c.steps > 0 && x.group().recorder() != g.recorder();
  Moving<T, B> m = rebind ? run_chain_on(x.rebind(g), c) : run_chain_on(x, c);
  m.group = g;
  return m;
}

/// The local product of the plan (the layouts are the operands' after their chains).
template <class T, class B>
Moving<T, B> run_product(const Moving<T, B>& a, bool ta, const Moving<T, B>& b, bool tb, Index m, Index n) {
  const MatmulRule rule = matmul_rule(ta ? transpose(a.kind) : a.kind, tb ? transpose(b.kind) : b.kind);
  if (!rule.valid) throw Error("matmul<To>: the planner chose an invalid local product");  // unreachable
  const int p = a.group.size();
  auto e = explain_op(a.group, "matmul", dtype_of<T>,
                      {ta ? "(" : "", note(a.rows, a.cols, a.kind), ta ? ")ᵀ" : "", " · ", tb ? "(" : "",
                       note(b.rows, b.cols, b.kind), tb ? ")ᵀ" : "", " → ", note(m, n, rule.result)});
  return {nullptr, local_product<T, B>(B::view(a.local(), ta), B::view(b.local(), tb), rule, m, n, a.group.rank(), p),
          m, n, rule.result, a.group};
}

template <class To, class T, class B>
Sharded<T, To, B> run_chain_to(Moving<T, B>&& z, const plan::Chain& c) {
  for (int i = 0; i < c.steps; ++i) z = step_to(std::move(z), c.at[static_cast<std::size_t>(i) + 1]);
  return Sharded<T, To, B>(std::move(z.owned), z.rows, z.cols, std::move(z.group));
}

/// The chain of an operand on the tensor under it: op(A) in L′ ⇔ A in L′ᵀ.
template <class X>
plan::Chain chain_under(const plan::Chain& c) {
  plan::Chain under = c;
  if constexpr (operand_t<X>::trans)
    for (auto& k : under.at) k = transpose(k);
  return under;
}

template <class To, class A, class B>
plan::MatmulPlan matmul_plan_for(const A& a, const B& b, const plan::Model& model) {
  using OA = operand_t<A>;
  using OB = operand_t<B>;
  const auto [m, k] = global_shape(a);
  const auto [k2, n] = global_shape(b);
  if (k != k2)
    throw ShapeError(cat("matmul<", To::name, ">: inner dimensions do not match: ", m, "x", k, " · ", k2, "x", n));
  const int p = OA::tensor(a).group().size();
  const auto pl = plan::choose_matmul(OA::kind, OB::kind, To::kind, m, k, n, p,
                                      sizeof(typename OA::value_type), model);
  if (!pl.feasible)
    throw DivisibilityError(cat("matmul<", To::name, ">: no plan divides the shapes ", m, "x", k, " · ", k2, "x",
                                n, " on a group of size ", p));
  return pl;
}


// The planner's steps for float and double on the CPU — step_to and a chain's first step
// instantiate every collective of the table (plan/plan.hpp) for every layout pair — as `extern
// template` here under SHARDALG_EXTERN_TEMPLATES and defined in src/algebra.cpp (KW: the keywords).
#define SHARDALG_PLAN_INSTANCES_L(KW, T, L)                                                                            \
  KW Moving<T, CpuBackend> run_chain_on<T, L, CpuBackend>(const Sharded<T, L, CpuBackend>&, const plan::Chain&);       \
  KW Moving<T, CpuBackend> run_chain_on<T, L, CpuBackend>(const Sharded<T, L, CpuBackend>&, const plan::Chain&,        \
                                                          const Group&);                                               \
  KW Sharded<T, L, CpuBackend> run_chain_to<L, T, CpuBackend>(Moving<T, CpuBackend>&&, const plan::Chain&);
#define SHARDALG_PLAN_INSTANCES(KW, T)                                                                                 \
  KW Moving<T, CpuBackend> step_to<T, CpuBackend>(Moving<T, CpuBackend>&&, LayoutKind);                                \
  KW Moving<T, CpuBackend> run_product<T, CpuBackend>(const Moving<T, CpuBackend>&, bool, const Moving<T, CpuBackend>&, \
                                                      bool, Index, Index);                                             \
  SHARDALG_PLAN_INSTANCES_L(KW, T, Replicated)                                                                         \
  SHARDALG_PLAN_INSTANCES_L(KW, T, RowSharded)                                                                         \
  SHARDALG_PLAN_INSTANCES_L(KW, T, ColSharded)                                                                         \
  SHARDALG_PLAN_INSTANCES_L(KW, T, Partial)
#if defined(SHARDALG_EXTERN_TEMPLATES)
SHARDALG_PLAN_INSTANCES(extern template, float)
SHARDALG_PLAN_INSTANCES(extern template, double)
#endif

}  // namespace detail

/// The plan matmul<To>(a, b, model) runs: describe() prints it in layout notation.
template <class To, detail::MatmulOperand A, detail::MatmulOperand B>
plan::MatmulPlan matmul_plan(const A& a, const B& b, const plan::Model& model = {}) {
  require<Diag::plan_target, Layout<To> && !std::is_same_v<To, Invariant>, To>();
  detail::check_operand(detail::operand_t<A>::tensor(a).group(), "matmul_plan");
  detail::check_operand(detail::operand_t<B>::tensor(b).group(), "matmul_plan");
  return detail::matmul_plan_for<To>(a, b, model);
}

/// op(A) · op(B) in layout To, with the plan's collectives inserted (each ledgered).
template <class To, detail::MatmulOperand A, detail::MatmulOperand B>
auto matmul(const A& a, const B& b, const plan::Model& model = {}) {
  using OA = detail::operand_t<A>;
  using OB = detail::operand_t<B>;
  using T = typename OA::value_type;
  if constexpr (!Layout<To> || std::is_same_v<To, Invariant>) {
    return diagnose<Diag::plan_target, To>();
  } else if constexpr (!std::is_same_v<T, typename OB::value_type>) {
    return diagnose<Diag::dtype_mismatch, A>();
  } else if constexpr (OA::kind == LayoutKind::invariant || OB::kind == LayoutKind::invariant) {
    return diagnose<Diag::invariant_mix, A>();  // the planner works outside the invariant world: f first
  } else {
    using Bk = typename OA::backend;
    const auto& ta = OA::tensor(a);
    const auto& tb = OB::tensor(b);
    // The handle of the result, and of every step on either operand: the ledgered one of the two.
    const Group g = detail::result_group(ta.group(), tb.group(), "matmul");
    const plan::MatmulPlan pl = detail::matmul_plan_for<To>(a, b, model);
    const auto m = detail::global_shape(a).first, n = detail::global_shape(b).second;
    // op(A) · op(B) → C[To]: the chains and the local product are listed under it.
    auto e = explain_op(g, detail::planned_matmul_name(To::kind), dtype_of<T>,
                        {detail::operand_note<0>(a), detail::operand_note<1>(a), detail::operand_note<2>(a), " · ",
                         detail::operand_note<0>(b), detail::operand_note<1>(b), detail::operand_note<2>(b), " → ",
                         note(m, n, To::kind)});
    const detail::Moving<T, Bk> a2 = detail::run_chain_on(ta, detail::chain_under<A>(pl.pre_a), g);
    const detail::Moving<T, Bk> b2 = detail::run_chain_on(tb, detail::chain_under<B>(pl.pre_b), g);
    return detail::run_chain_to<To>(detail::run_product(a2, OA::trans, b2, OB::trans, m, n), pl.post);
  }
}

/// The cotangents of both operands of C = op(A)·op(B) (for a transpose view: of the tensor under it).
template <class DA, class DB>
struct MatmulGrads {
  DA da;
  DB db;
};

namespace detail {
/// op(X)ᵀ as an operand: the tensor under a view, or a view of a plain tensor.
template <class T, class L, class B>
Transposed<T, L, B> flip(const Sharded<T, L, B>& x) {
  return transpose(x);
}
template <class T, class L, class B>
const Sharded<T, L, B>& flip(const Transposed<T, L, B>& x) {
  return x.of;
}
template <class X>
using cot_of_t = cotangent_t<typename std::remove_cvref_t<decltype(operand_t<X>::tensor(std::declval<X>()))>::layout>;
}  // namespace detail

namespace adjoint {
/// Backward of matmul<To>(a, b): dC (To's cotangent, or Partial for an R result that fed sharded
/// work) → {dA, dB}, each a planned product in its operand's cotangent layout.
///   plain A:  dA = dC · op(B)ᵀ        A under a view (op(A) = Aᵀ):  dA = op(B) · dCᵀ
///   plain B:  dB = op(A)ᵀ · dC        B under a view:              dB = dCᵀ · op(A)
template <detail::MatmulOperand A, detail::MatmulOperand B, class T, class L, class Bk>
auto matmul(const A& a, const B& b, const Sharded<T, L, Bk>& dc, const plan::Model& m = {}) {
  using CA = detail::cot_of_t<A>;
  using CB = detail::cot_of_t<B>;
  auto da = [&] {
    if constexpr (detail::operand_t<A>::trans) return shardalg::matmul<CA>(b, transpose(dc), m);
    else return shardalg::matmul<CA>(dc, detail::flip(b), m);
  }();
  auto db = [&] {
    if constexpr (detail::operand_t<B>::trans) return shardalg::matmul<CB>(transpose(dc), a, m);
    else return shardalg::matmul<CB>(detail::flip(a), dc, m);
  }();
  return MatmulGrads<decltype(da), decltype(db)>{std::move(da), std::move(db)};
}
}  // namespace adjoint

}  // namespace shardalg
