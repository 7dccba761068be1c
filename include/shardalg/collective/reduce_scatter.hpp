// shardalg/collective/reduce_scatter.hpp — Z[Partial] → Z[Row] (or Z[C]): rank r gets block r
// of Σ_s Z_s. Ring traffic per rank: (P−1)/P · V (half an all-reduce). Adjoint: all_gather.
#pragma once

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// Partial → To (RowSharded or ColSharded).
template <SplitLayout To, class T, class L, class B>
auto reduce_scatter(const Sharded<T, L, B>& x) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::reduce_scatter_input, L>();
  } else {
    detail::check_operand(x.group(), "reduce_scatter<", To::name, ">");
    const int p = x.size();
    auto e = explain_op(x.group(), "reduce_scatter", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    const CallInfo info{"Partial", To::notation};
    Group g = x.group();
    if (!even_split(To::kind, x.rows(), x.cols(), p)) {  // blocks of n/P ± 1: collective/uneven.hpp
      auto mine = detail::reduce_scatter_uneven<T, B>(x.local(), std::is_same_v<To, RowSharded>, g, info);
      return Sharded<T, To, B>(std::move(mine), x.rows(), x.cols(), std::move(g));
    }
    const auto [lr, lc] = local_shape(To::kind, x.rows(), x.cols(), p, x.rank());
    auto out = B::template empty<T>(lr, lc);
    const auto n = static_cast<std::size_t>(lr * lc);
    if constexpr (std::is_same_v<To, RowSharded>) {
      g.reduce_scatter(x.local().data(), out.data(), n, ReduceOp::sum, info);  // row blocks are contiguous
    } else {
      const auto packed = B::pack_col_blocks(x.local(), p);
      g.reduce_scatter(packed.data(), out.data(), n, ReduceOp::sum, info);
    }
    return Sharded<T, To, B>(std::move(out), x.rows(), x.cols(), std::move(g));
  }
}

namespace adjoint {
/// Backward of reduce_scatter: dZ[Row or C] → dZ[R] by all_gather (every summand gets it all).
template <class T, SplitLayout L, class B>
Sharded<T, Replicated, B> reduce_scatter(const Sharded<T, L, B>& dy) {
  return shardalg::all_gather(dy);
}
}  // namespace adjoint

}  // namespace shardalg
