// shardalg/collective/split.hpp — X[R] or X[I] → X[Row] (or X[C]): keep your own block. No
// communication. Adjoint: all_gather back to the input's layout (the layers' R convention, and
// I: every rank needs the whole gradient).
#pragma once

#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// R or I → To (RowSharded or ColSharded), a local slice.
template <SplitLayout To, class T, class L, class B>
auto split(const Sharded<T, L, B>& x) {
  if constexpr (!WholeLayout<L>) {
    return diagnose<Diag::split_input, L>();
  } else {
    detail::check_operand(x.group(), "split<", To::name, ">");
    const int p = x.size(), r = x.rank();
    auto e = explain_op(x.group(), "split", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    const auto [lr, lc] = local_shape(To::kind, x.rows(), x.cols(), p, r);
    const Index r0 = To::kind == LayoutKind::row ? block_offset(x.rows(), p, r) : 0;
    const Index c0 = To::kind == LayoutKind::col ? block_offset(x.cols(), p, r) : 0;
    return Sharded<T, To, B>(B::copy_block(x.local(), r0, c0, lr, lc), x.rows(), x.cols(), x.group());
  }
}

template <WholeLayout To, class T, class L, class B>
auto all_gather(const Sharded<T, L, B>& x);

namespace adjoint {
/// Backward of split from From (R by default, or I): dX[Row or C] → dX[From] by all_gather.
template <WholeLayout From = Replicated, class T, SplitLayout L, class B>
Sharded<T, From, B> split(const Sharded<T, L, B>& dy) {
  return shardalg::all_gather<From>(dy);
}
}  // namespace adjoint

}  // namespace shardalg
