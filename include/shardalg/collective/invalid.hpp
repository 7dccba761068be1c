// shardalg/collective/invalid.hpp — the result of an invalid operation (its [shardalg.E1xx]
// assertion has already fired) passes through every further operation silently, so the compiler
// reports the one diagnostic and not a cascade of "no matching function" errors after it.
#pragma once

#include "shardalg/base/errors.hpp"
#include <type_traits>

#include "shardalg/base/layout.hpp"

namespace shardalg {

inline InvalidOperation all_reduce(InvalidOperation) { return {}; }
inline InvalidOperation all_reduce_start(InvalidOperation) { return {}; }
inline InvalidOperation all_gather(InvalidOperation) { return {}; }
inline InvalidOperation copy_to(InvalidOperation) { return {}; }
inline InvalidOperation reduce_from(InvalidOperation) { return {}; }
inline InvalidOperation to_partial(InvalidOperation) { return {}; }
inline InvalidOperation transpose(InvalidOperation) { return {}; }
template <class To>
InvalidOperation reduce_scatter(InvalidOperation) { return {}; }
template <class To>
InvalidOperation split(InvalidOperation) { return {}; }
template <class To>
InvalidOperation all_to_all(InvalidOperation) { return {}; }
template <class To, class... Rest>
InvalidOperation redistribute(InvalidOperation, const Rest&...) { return {}; }
template <class F>
InvalidOperation map(InvalidOperation, F) { return {}; }
template <class... To, class X>
InvalidOperation matmul(InvalidOperation, const X&) { return {}; }
template <class... To, class X>
  requires(!std::is_same_v<X, InvalidOperation>)
InvalidOperation matmul(const X&, InvalidOperation) { return {}; }

}  // namespace shardalg
