// shardalg/collective/all_to_all.hpp — X[Row] ↔ X[C]: each rank keeps 1/P of its block and
// exchanges the rest. Traffic per rank: (P−1)/P² · V. Adjoint: all_to_all back.
#pragma once

#include "shardalg/collective/uneven.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// Row → C or C → Row.
template <SplitLayout To, class T, class L, class B>
auto all_to_all(const Sharded<T, L, B>& x) {
  if constexpr (!SplitLayout<L> || std::is_same_v<L, To>) {
    return diagnose<Diag::all_to_all_input, L>();
  } else {
    detail::check_operand(x.group(), "all_to_all<", To::name, ">");
    const int p = x.size();
    auto e = explain_op(x.group(), "all_to_all", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    const CallInfo info{L::notation, To::notation};
    Group g = x.group();
    if (!even_blocks(x.rows(), p) || !even_blocks(x.cols(), p)) {  // tiles of unequal sizes: collective/uneven.hpp
      auto mine = detail::exchange_uneven<T, B>(x.local(), x.rows(), x.cols(), std::is_same_v<To, ColSharded>, g, info);
      return Sharded<T, To, B>(std::move(mine), x.rows(), x.cols(), std::move(g));
    }
    const Index br = x.rows() / p, bc = x.cols() / p;  // the exchanged tile is br × bc
    const auto n = static_cast<std::size_t>(br * bc);
    if constexpr (std::is_same_v<To, ColSharded>) {
      // [br, cols] → tiles by destination column block; the received tiles stack to [rows, bc].
      const auto send = B::pack_col_blocks(x.local(), p);
      auto out = B::template empty<T>(x.rows(), bc);
      g.all_to_all(send.data(), out.data(), n, info);
      return Sharded<T, To, B>(std::move(out), x.rows(), x.cols(), std::move(g));
    } else {
      // [rows, bc] is already tiles by destination row block; received tiles are column blocks.
      auto stacked = B::template empty<T>(p * br, bc);
      g.all_to_all(x.local().data(), stacked.data(), n, info);
      return Sharded<T, To, B>(B::unpack_col_blocks(stacked, p), x.rows(), x.cols(), std::move(g));
    }
  }
}

namespace adjoint {
/// Backward of all_to_all<To>: all_to_all back to the forward input layout.
template <SplitLayout From, class T, class L, class B>
auto all_to_all(const Sharded<T, L, B>& dy) {
  return shardalg::all_to_all<From>(dy);
}
}  // namespace adjoint

}  // namespace shardalg
