// shardalg/core/cast.hpp — cast<U>(x): the same matrix with element type U.
//
//   cast<U>(X[L]) → X[L]     every layout, Partial too: each rank converts its own block, so a
//                            Partial stays the sum of its (converted) summands; no communication
//
// The fix [shardalg.E140] names for operands of different element types:
//   matmul(a[R]<double>, cast<double>(b[C]<float>)).
// The conversion is static_cast's, element by element (double → float rounds, float → int
// truncates). The result keeps x's layout, global shape and group handle (its ledger too).
#pragma once

#include <type_traits>

#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

template <Element U, class T, class L, class B>
Sharded<U, L, B> cast(const Sharded<T, L, B>& x) {
  static_assert(requires(const typename B::template matrix<T>& m) { B::template cast<U>(m); },
                "shardalg: cast<U>(x) needs the backend's cast<U>(block)");
  detail::check_operand(x.group(), "cast");
  auto e = explain_op(x.group(), "cast", dtype_of<U>, {to_string(dtype_of<T>), " ", note(x), " → ", to_string(dtype_of<U>), " ", note(x)});
  if constexpr (std::is_same_v<U, T>) {
    return x;
  } else {
    return Sharded<U, L, B>(B::template cast<U>(x.local()), x.rows(), x.cols(), x.group());
  }
}

}  // namespace shardalg
