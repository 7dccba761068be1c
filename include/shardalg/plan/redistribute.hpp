// shardalg/plan/redistribute.hpp — redistribute<To>(x): any layout to any layout by the
// cheapest chain of plan/plan.hpp, each communicating step a named, ledgered collective.
//
//   X[Partial] → X[R]     all_reduce                 X[R] → X[C]         split (free)
//   X[Row] → X[C]         all_to_all                 X[C] → X[Partial]   to_partial (free)
//
// The set of chains is fixed at compile time (≤ 2 steps, plan::chains); the pick uses the run-time
// shape and the group size: with the α-β ring model of cost/ the direct step is always the
// cheapest, and a chain through another layout is chosen only where the direct step's layout
// does not divide (never, today: every step's layouts are From and To).
//
// Adjoint: redistribution is the identity on the dense value, so its adjoint is too; it moves
// the cotangent to cot(From), with cot(R) = R, cot(Row) = Row, cot(C) = C, cot(Partial) = R (the
// adjoint table of docs/design.md §5): adjoint::redistribute<From>(dy) = redistribute<cot(From)>(dy).
// A Partial cotangent of an R value (the value fed sharded work) is accepted too and reduced.
#pragma once

#include <type_traits>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/all_to_all.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/plan/plan.hpp"

namespace shardalg {

/// R, I, Row or C → Partial, no communication: the value stays where it is, zeros elsewhere
/// (R, I: rank 0 keeps it; Row/C: each rank's block in a zero matrix of the global shape).
template <class T, class L, class B>
auto to_partial(const Sharded<T, L, B>& x) {
  if constexpr (std::is_same_v<L, Partial>) {
    return diagnose<Diag::to_partial_input, L>();
  } else {
    detail::check_operand(x.group(), "to_partial");
    auto e = explain_op(x.group(), "to_partial", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), LayoutKind::partial)});
    auto out = B::template zeros<T>(x.rows(), x.cols());
    if constexpr (WholeLayout<L>) {
      if (x.rank() == 0) out = x.local();
    } else {
      B::paste_block(out, x.row_offset(), x.col_offset(), x.local());
    }
    return Sharded<T, Partial, B>(std::move(out), x.rows(), x.cols(), x.group());
  }
}

namespace detail {

/// Calls f(Layout{}) with the layout tag of a run-time kind (instantiates f for all four).
template <class F>
decltype(auto) with_layout(LayoutKind k, F&& f) {
  switch (k) {
    case LayoutKind::replicated: return f(Replicated{});
    case LayoutKind::row: return f(RowSharded{});
    case LayoutKind::col: return f(ColSharded{});
    case LayoutKind::partial: break;
    case LayoutKind::invariant: break;  // never a plan's layout (E151, E170)
  }
  return f(Partial{});
}

/// The direct step From → To of the table in plan/plan.hpp, as the named collective.
template <class To, class T, class L, class B>
Sharded<T, To, B> step(const Sharded<T, L, B>& x) {
  if constexpr (std::is_same_v<L, To>) return x;
  else if constexpr (std::is_same_v<To, Partial>) return to_partial(x);
  else if constexpr (std::is_same_v<L, Replicated>) return split<To>(x);
  else if constexpr (std::is_same_v<L, Partial> && std::is_same_v<To, Replicated>) return all_reduce(x);
  else if constexpr (std::is_same_v<L, Partial>) return reduce_scatter<To>(x);
  else if constexpr (std::is_same_v<To, Replicated>) return all_gather(x);
  else return all_to_all<To>(x);
}

/// Runs a chain whose end is To (its middle is a run-time layout).
template <class To, class T, class L, class B>
Sharded<T, To, B> run_chain(const Sharded<T, L, B>& x, const plan::Chain& c) {
  if (c.steps < 2) return step<To>(x);
  return with_layout(c.at[1], [&](auto via) { return step<To>(step<decltype(via)>(x)); });
}

template <class T, class L, class B>
plan::RedistributePlan redistribute_plan_for(const Sharded<T, L, B>& x, LayoutKind to, const plan::Model& m) {
  check_operand(x.group(), "redistribute<", name(to), ">");
  const auto pl = plan::choose_redistribute(L::kind, to, x.rows(), x.cols(), x.size(), sizeof(T), m);
  if (!pl.feasible)
    throw DivisibilityError(cat("redistribute<", name(to), ">: a ", x.rows(), "x", x.cols(), " ", L::name,
                                " matrix cannot be held as ", name(to), " on a group of size ", x.size()));
  return pl;
}

}  // namespace detail

/// The chain redistribute<To>(x, m) would run (for printing, explain and tests).
template <class To, class T, class L, class B>
plan::RedistributePlan redistribute_plan(const Sharded<T, L, B>& x, const plan::Model& m = {}) {
  require<Diag::plan_target, Layout<To> && !std::is_same_v<To, Invariant>, To>();
  return detail::redistribute_plan_for(x, To::kind, m);
}

/// Any layout → To by the cheapest chain; each communicating step is ledgered as its collective.
template <class To, class T, class L, class B>
auto redistribute(const Sharded<T, L, B>& x, const plan::Model& m = {}) {
  if constexpr (!Layout<To> || std::is_same_v<To, Invariant>) {
    return diagnose<Diag::plan_target, To>();
  } else if constexpr (std::is_same_v<L, Invariant>) {
    return diagnose<Diag::invariant_mix, L>();  // leave the invariant world by f = copy_to first
  } else {
    const auto pl = detail::redistribute_plan_for(x, To::kind, m);
    // X[L] → X[To]; the chain's steps are listed under it as the collectives they are.
    auto e = explain_op(x.group(), "redistribute", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    return detail::run_chain<To>(x, pl.chain);
  }
}

/// cot(L) in the adjoint table's convention: Partial → R, every other layout → itself.
template <class L>
using cotangent_t = std::conditional_t<std::is_same_v<L, Partial>, Replicated, L>;

namespace adjoint {
/// Backward of redistribute<To> whose input had layout From: the cotangent dy (cot(To), or
/// Partial for an R output that fed sharded work) back to cot(From), by the cheapest chain.
template <class From, class T, class L, class B>
auto redistribute(const Sharded<T, L, B>& dy, const plan::Model& m = {}) {
  return shardalg::redistribute<cotangent_t<From>>(dy, m);
}
}  // namespace adjoint

}  // namespace shardalg
