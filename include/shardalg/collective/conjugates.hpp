// shardalg/collective/conjugates.hpp — Megatron's conjugate pair at the edges of a
// tensor-parallel region, as conversions between the invariant world and the per-rank one:
//
//   f = copy_to      X[I] → X[R]         forward: identity    backward: all_reduce dX[Partial] → dX[I]
//   g = reduce_from  Z[Partial] → Z[I]   forward: all_reduce  backward: identity dZ[I] → dZ[R]
//     (reduce_from<Invariant>(z) = all_reduce<Invariant>(z))
//
// In a column-parallel → row-parallel pair, f stands before the first matmul and g after the
// second: one all-reduce forward (g), one backward (f's adjoint). The hand-written layers keep
// the residual stream typed R and read its cotangent as whole (the I convention): for them
// copy_to is R → R and reduce_from returns R, as before.
#pragma once

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/core/explain.hpp"

namespace shardalg {

/// f: enter a tensor-parallel region. Identity forward (no communication): X[I] → X[R] (and
/// X[R] → X[R] for the layers' R convention).
template <class T, class L, class B>
auto copy_to(Sharded<T, L, B> x) {
  if constexpr (!WholeLayout<L>) {
    return diagnose<Diag::copy_to_input, L>();
  } else {
    const Index r = x.rows(), c = x.cols();
    Group g = x.group();
    // f in the explain log: no collective now; its adjoint is the backward's all_reduce
    auto e = explain_op(g, "copy_to (f)", dtype_of<T>, {note(x), " → ", note(r, c, LayoutKind::replicated)});
    return Sharded<T, Replicated, B>(std::move(x).local(), r, c, std::move(g));
  }
}

/// g: leave a tensor-parallel region. All-reduce forward: Z[Partial] → Z[To], To = R (the
/// layers' convention) or I.
template <WholeLayout To = Replicated, class T, class L, class B>
auto reduce_from(Sharded<T, L, B> z) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::reduce_from_input, L>();
  } else {
    return all_reduce<To>(std::move(z));
  }
}

/// R → I, free: a replicated value from here on used only by work every rank repeats. Its
/// gradient then arrives whole on every rank (I), and the R value's cotangent is Partial: the
/// adjoint puts it on rank 0 (to_partial), the others zero. (The way into I from a per-rank
/// computation is g: all_reduce<Invariant>.)
template <class T, class L, class B>
auto to_invariant(Sharded<T, L, B> x) {
  if constexpr (!std::is_same_v<L, Replicated>) {
    return diagnose<Diag::invariant_mix, L>();
  } else {
    const Index r = x.rows(), c = x.cols();
    Group g = x.group();
    return Sharded<T, Invariant, B>(std::move(x).local(), r, c, std::move(g));
  }
}

namespace adjoint {
/// Backward of f: the cotangent of X is Partial (X fed sharded matmuls); all_reduce it to
/// cot(I) = I (To = Invariant), or to R for the layers' R convention.
template <WholeLayout To = Replicated, class T, class B>
Sharded<T, To, B> copy_to(Sharded<T, Partial, B> dx) {
  return shardalg::all_reduce<To>(std::move(dx));
}
/// Backward of g: identity (dZ[R] → dZ[R] in the layers' convention, dZ[I] → dZ[R] typed).
template <class T, class B>
Sharded<T, Replicated, B> reduce_from(Sharded<T, Replicated, B> dz) {
  return dz;
}
template <class T, class B>
Sharded<T, Replicated, B> reduce_from(Sharded<T, Invariant, B> dz) {
  return adjoint::all_reduce(std::move(dz));
}
}  // namespace adjoint

}  // namespace shardalg
