// shardalg/collective/conjugates.hpp — Megatron's conjugate pair at the edges of a
// tensor-parallel region:
//
//   f = copy_to     X[R] → X[R]           forward: identity    backward: all_reduce(dX[Partial])
//   g = reduce_from Z[Partial] → Z[R]     forward: all_reduce  backward: identity
//
// In a column-parallel → row-parallel pair, f stands before the first matmul and g after the
// second: one all-reduce forward (g), one backward (f's adjoint).
#pragma once

#include "shardalg/collective/all_reduce.hpp"

namespace shardalg {

/// f: enter a tensor-parallel region. Identity forward (no communication).
template <class T, class L, class B>
auto copy_to(Sharded<T, L, B> x) {
  if constexpr (!std::is_same_v<L, Replicated>) {
    return diagnose<Diag::copy_to_input, L>();
  } else {
    return x;
  }
}

/// g: leave a tensor-parallel region. All-reduce forward.
template <class T, class L, class B>
auto reduce_from(Sharded<T, L, B> z) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::reduce_from_input, L>();
  } else {
    return all_reduce(std::move(z));
  }
}

namespace adjoint {
/// Backward of f: the cotangent of X is Partial (X fed sharded matmuls); all_reduce it.
template <class T, class B>
Sharded<T, Replicated, B> copy_to(Sharded<T, Partial, B> dx) {
  return shardalg::all_reduce(std::move(dx));
}
/// Backward of g: identity.
template <class T, class B>
Sharded<T, Replicated, B> reduce_from(Sharded<T, Replicated, B> dz) {
  return dz;
}
}  // namespace adjoint

}  // namespace shardalg
