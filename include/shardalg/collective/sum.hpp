// shardalg/collective/sum.hpp — sum(x) = Σ_{i,k} X[i,k], the sum of every element of the dense value,
// as a 1×1 tensor on x's group: s[I] for X[I], s[R] otherwise. The collective is the one the layout requires:
//
//   sum(X[R])        → s[R]   every rank sums its whole copy                   no collective
//   sum(X[I])        → s[I]   the same, in the invariant world                  no collective
//   sum(X[Row])      → s[R]   rank r sums its rows I_r: s_r[Partial]           all_reduce, 1 element
//   sum(X[C])        → s[R]   rank r sums its columns K_r: s_r[Partial]        all_reduce, 1 element
//   sum(Z[Partial])  → s[R]   Σ is linear: Σ(Σ_r Z_r) = Σ_r Σ(Z_r)              all_reduce, 1 element
//
// The all_reduce is the named collective (Partial → R), so a ledger records it. Rank r's local
// sum is Σ_k (Σ_i X_r[i,k]) (the backend's col_sum, then row_sum); the summands of a floating-
// point sum are grouped by rank, so the result may differ from a dense sum in the last bits.
#pragma once

#include <type_traits>
#include <utility>

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

template <class T, class L, class B>
auto sum(const Sharded<T, L, B>& x) {
  detail::check_operand(x.group(), "sum");
  // Σ X[L] → [L] for R and I (local), else [R]: the partial sums all-reduced (listed as a child op).
  auto e = explain_op(x.group(), "sum", dtype_of<T>,
                      {"Σ ", note(x), " → ", note(1, 1, WholeLayout<L> ? L::kind : LayoutKind::replicated)});
  auto s = B::row_sum(B::col_sum(x.local()));  // [1, 1]: Σ of this rank's block
  if constexpr (WholeLayout<L>) {
    return Sharded<T, L, B>(std::move(s), 1, 1, x.group());
  } else {
    return Sharded<T, Replicated, B>(all_reduce(Sharded<T, Partial, B>(std::move(s), 1, 1, x.group())));
  }
}

}  // namespace shardalg
