// shardalg/collective/all_gather.hpp — X[Row] (or X[C]) → X[R] (or X[I]): every rank gets every
// block. Ring traffic per rank: (P−1)/P · V. Blocks that do not divide (base/blocks.hpp) go
// through collective/uneven.hpp.
//
//   all_gather(x)              V → R   backward: reduce_scatter Partial → V   (cot(R) = Partial)
//   all_gather<Invariant>(x)   V → I   backward: split I → V (free)           (SP's gather whose
//                                                    output feeds only redundant work)
// The layers' R convention (an R cotangent read as whole) takes split, as for I.
#pragma once

#include "shardalg/collective/split.hpp"
#include "shardalg/collective/uneven.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

namespace detail {
template <class T, class L, class B>
typename B::template matrix<T> gather_local(const Sharded<T, L, B>& x, Group& g, const CallInfo& info) {
  const int p = x.size();
  const auto n = static_cast<std::size_t>(x.local().size());
  if (!even_split(L::kind, x.rows(), x.cols(), p))
    return gather_uneven<T, B>(x.local(), x.rows(), x.cols(), std::is_same_v<L, RowSharded>, g, info);
  if constexpr (std::is_same_v<L, RowSharded>) {
    auto out = B::template empty<T>(x.rows(), x.cols());  // row blocks land contiguously
    g.all_gather(x.local().data(), out.data(), n, info);
    return out;
  } else {
    auto stacked = B::template empty<T>(p * x.rows(), x.local_cols());
    g.all_gather(x.local().data(), stacked.data(), n, info);
    return B::unpack_col_blocks(stacked, p);
  }
}
}  // namespace detail

/// Row or C → To (R by default, or I).
template <WholeLayout To = Replicated, class T, class L, class B>
auto all_gather(const Sharded<T, L, B>& x) {
  if constexpr (!SplitLayout<L>) {
    return diagnose<Diag::all_gather_input, L>();
  } else {
    detail::check_operand(x.group(), "all_gather");
    auto e = explain_op(x.group(), "all_gather", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    Group g = x.group();
    auto out = detail::gather_local(x, g, CallInfo{L::notation, To::notation});
    return Sharded<T, To, B>(std::move(out), x.rows(), x.cols(), std::move(g));
  }
}

// The adjoint of all_gather needs reduce_scatter; reduce_scatter.hpp includes this file.
template <SplitLayout To, class T, class L, class B>
auto reduce_scatter(const Sharded<T, L, B>& x);

namespace adjoint {
/// Backward of all_gather (forward input layout From): a Partial cotangent (of an R output) is
/// reduce-scattered back to From; an I cotangent (of an I output), or an R one in the layers'
/// convention, is split (free).
template <SplitLayout From, class T, class L, class B>
auto all_gather(const Sharded<T, L, B>& dy) {
  if constexpr (std::is_same_v<L, Partial>) return shardalg::reduce_scatter<From>(dy);
  else return shardalg::split<From>(dy);
}
}  // namespace adjoint

}  // namespace shardalg
