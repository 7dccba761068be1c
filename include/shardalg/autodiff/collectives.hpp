// shardalg/autodiff/collectives.hpp — every redistribution and conversion, differentiable; each
// backward is the adjoint of docs/design.md §5a, so a derived backward's collectives are exactly
// the adjoints of the forward's:
//
//   forward                        layouts          backward (the adjoint)
//   copy_to(x)              (f)    I → R            all_reduce<Invariant>   Partial → I
//   to_invariant(x)                R → I            to_partial (free)       I → Partial (rank 0)
//   all_reduce<Invariant>(z) (g)   Partial → I      identity                I → R
//   all_reduce(z)                  Partial → R      all_reduce              Partial → R
//   all_gather(x)                  Row/C → R        reduce_scatter          Partial → Row/C
//   all_gather<Invariant>(x)       Row/C → I        split (free)            I → Row/C
//   split<To>(x) from R            R → Row/C        to_partial (free)       Row/C → Partial
//   split<To>(x) from I            I → Row/C        all_gather<Invariant>   Row/C → I
//   reduce_scatter<To>(z)          Partial → Row/C  all_gather              Row/C → R
//   all_to_all<To>(x)              Row ↔ C          all_to_all back         C ↔ Row
//   to_partial(x)                  R/Row/C/I → P    to_partial / split / identity (free)
//   redistribute<To>(x)            any → To         the steps' adjoints, in reverse
#pragma once

#include <type_traits>
#include <utility>

#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/all_to_all.hpp"
#include "shardalg/collective/conjugates.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/plan/redistribute.hpp"

namespace shardalg::ad {

namespace detail {
/// The same block, relabelled (an identity on the value: I ↔ R conversions of a cotangent).
template <Layout To, class T, class L, class B>
Sharded<T, To, B> relabel(const Sharded<T, L, B>& x) {
  return Sharded<T, To, B>(x.local(), x.rows(), x.cols(), x.group());
}
}  // namespace detail

/// f: I → R (identity forward); backward all_reduce<Invariant> of the Partial cotangent.
template <class T, class L, class B>
auto copy_to(const Var<T, L, B>& x) {
  auto y = shardalg::copy_to(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, Replicated, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const Sharded<T, Partial, B>& dy) {
          if constexpr (std::is_same_v<L, Invariant>) t.accumulate(hx, shardalg::all_reduce<Invariant>(dy));
          else t.accumulate(hx, dy);  // R → R: the identity (cot(R) = Partial on both sides)
        },
        x);
  }
}

/// R → I, free; backward: the whole cotangent on rank 0 (to_partial), the R value's Partial.
template <class T, class L, class B>
auto to_invariant(const Var<T, L, B>& x) {
  auto y = shardalg::to_invariant(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, Invariant, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const Sharded<T, Invariant, B>& dy) {
          t.accumulate(hx, shardalg::to_partial(detail::relabel<Replicated>(dy)));
        },
        x);
  }
}

/// all_reduce<To>: Partial → To (R, or I: Megatron's g).
template <WholeLayout To = Replicated, class T, class L, class B>
auto all_reduce(const Var<T, L, B>& z) {
  auto y = shardalg::all_reduce<To>(z.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, To, B>(
        std::move(y),
        [hz = z.handle()](Tape& t, const auto& dy) {
          if constexpr (std::is_same_v<To, Invariant>) t.accumulate(hz, detail::relabel<Replicated>(dy));  // I → R
          else t.accumulate(hz, shardalg::all_reduce(dy));  // Partial → R
        },
        z);
  }
}
/// g, by Megatron's name: all_reduce<Invariant>.
template <class T, class L, class B>
auto reduce_from(const Var<T, L, B>& z) {
  return ad::all_reduce<Invariant>(z);
}

/// all_gather<To>: Row/C → To (R: backward reduce_scatter; I: backward split).
template <WholeLayout To = Replicated, class T, class L, class B>
auto all_gather(const Var<T, L, B>& x) {
  auto y = shardalg::all_gather<To>(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, To, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const auto& dy) {
          if constexpr (std::is_same_v<To, Invariant>) t.accumulate(hx, shardalg::split<L>(dy));
          else t.accumulate(hx, shardalg::reduce_scatter<L>(dy));
        },
        x);
  }
}

/// split<To>: R or I → Row/C, free (backward: to_partial from R, all_gather<Invariant> from I).
template <SplitLayout To, class T, class L, class B>
auto split(const Var<T, L, B>& x) {
  auto y = shardalg::split<To>(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, To, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const Sharded<T, To, B>& dy) {
          if constexpr (std::is_same_v<L, Invariant>) t.accumulate(hx, shardalg::all_gather<Invariant>(dy));
          else t.accumulate(hx, to_partial(dy));
        },
        x);
  }
}

/// reduce_scatter<To>: Partial → Row/C; backward all_gather → R.
template <SplitLayout To, class T, class L, class B>
auto reduce_scatter(const Var<T, L, B>& z) {
  auto y = shardalg::reduce_scatter<To>(z.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, To, B>(
        std::move(y), [hz = z.handle()](Tape& t, const Sharded<T, To, B>& dy) { t.accumulate(hz, shardalg::all_gather(dy)); },
        z);
  }
}

/// all_to_all<To>: Row ↔ C; backward all_to_all back.
template <SplitLayout To, class T, class L, class B>
auto all_to_all(const Var<T, L, B>& x) {
  auto y = shardalg::all_to_all<To>(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, To, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const Sharded<T, To, B>& dy) { t.accumulate(hx, shardalg::all_to_all<L>(dy)); }, x);
  }
}

/// to_partial: R, Row, C or I → Partial, free (rank 0 keeps a whole value; a block keeps its
/// place). Backward, from the R cotangent: to_partial (R: cot Partial), split (Row, C), identity (I).
template <class T, class L, class B>
auto to_partial(const Var<T, L, B>& x) {
  auto y = shardalg::to_partial(x.value());
  if constexpr (std::is_same_v<decltype(y), InvalidOperation>) {
    return y;
  } else {
    return detail::record<T, Partial, B>(
        std::move(y),
        [hx = x.handle()](Tape& t, const Sharded<T, Replicated, B>& dy) {
          if constexpr (std::is_same_v<L, Replicated>) t.accumulate(hx, shardalg::to_partial(dy));
          else if constexpr (std::is_same_v<L, Invariant>) t.accumulate(hx, detail::relabel<Invariant>(dy));
          else t.accumulate(hx, shardalg::split<L>(dy));
        },
        x);
  }
}

namespace detail {
/// One direct step of the planner's table (plan/redistribute.hpp's step<To>), differentiable.
template <class To, class T, class L, class B>
Var<T, To, B> step(const Var<T, L, B>& x) {
  if constexpr (std::is_same_v<L, To>) return x;
  else if constexpr (std::is_same_v<To, Partial>) return ad::to_partial(x);
  else if constexpr (std::is_same_v<L, Replicated>) return ad::split<To>(x);
  else if constexpr (std::is_same_v<L, Partial> && std::is_same_v<To, Replicated>) return ad::all_reduce(x);
  else if constexpr (std::is_same_v<L, Partial>) return ad::reduce_scatter<To>(x);
  else if constexpr (std::is_same_v<To, Replicated>) return ad::all_gather(x);
  else return ad::all_to_all<To>(x);
}
/// A planned chain ending in To; its middle layout is a run-time value.
template <class To, class T, class L, class B>
Var<T, To, B> run_chain(const Var<T, L, B>& x, const plan::Chain& c) {
  if (c.steps < 2) return step<To>(x);
  return shardalg::detail::with_layout(c.at[1], [&](auto via) { return step<To>(step<decltype(via)>(x)); });
}
}  // namespace detail

/// redistribute<To>: the planner's cheapest chain, each step a differentiable collective (so its
/// backward is the chain of the steps' adjoints, in reverse).
template <class To, class T, class L, class B>
auto redistribute(const Var<T, L, B>& x, const plan::Model& m = {}) {
  if constexpr (!Layout<To> || std::is_same_v<To, Invariant>) {
    return diagnose<Diag::plan_target, To>();
  } else if constexpr (std::is_same_v<L, Invariant>) {
    return diagnose<Diag::invariant_mix, L>();
  } else {
    const auto pl = shardalg::detail::redistribute_plan_for(x.value(), To::kind, m);
    return detail::run_chain<To>(x, pl.chain);
  }
}

}  // namespace shardalg::ad
