// shardalg/collective/all_reduce.hpp — Z[Partial] → Z[R]: every rank gets Σ_r Z_r.
// Ring traffic per rank: 2(P−1)/P · V.  Adjoint: identity (an R cotangent goes to every summand).
#pragma once

#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// Partial → R, in place on the moved-in block: `all_reduce(std::move(z))` copies nothing.
template <class T, class L, class B>
auto all_reduce(Sharded<T, L, B> x) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::all_reduce_input>();
  } else {
    const Index r = x.rows(), c = x.cols();
    Group g = x.group();
    auto local = std::move(x).local();
    g.all_reduce(local.data(), static_cast<std::size_t>(local.size()), ReduceOp::sum, CallInfo{"Partial", "R"});
    return Sharded<T, Replicated, B>(std::move(local), r, c, std::move(g));
  }
}

namespace adjoint {
/// Backward of all_reduce: dZ[R] → dZ_r[R] for every summand, no communication.
template <class T, class B>
Sharded<T, Replicated, B> all_reduce(Sharded<T, Replicated, B> dy) {
  return dy;
}
}  // namespace adjoint

}  // namespace shardalg
