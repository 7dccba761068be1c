// shardalg/autodiff/invalid.hpp — ad::'s ops on the result of an invalid op (its [shardalg.E1xx]
// assertion has fired; collective/invalid.hpp does the same for the core's ops): each passes the
// InvalidOperation on, and the tape takes it without complaint, so a chain of ad:: calls reports
// the one diagnostic and not a "no matching function" after it.
#pragma once

#include <type_traits>

#include "shardalg/base/diagnostics.hpp"
#include "shardalg/collective/invalid.hpp"

namespace shardalg {

// a + b, a − b with an invalid operand (the core's operators and ad::'s are found by ADL; these by
// InvalidOperation's namespace)
template <class X>
InvalidOperation operator+(InvalidOperation, const X&) { return {}; }
template <class X>
  requires(!std::is_same_v<X, InvalidOperation>)
InvalidOperation operator+(const X&, InvalidOperation) { return {}; }
template <class X>
InvalidOperation operator-(InvalidOperation, const X&) { return {}; }
template <class X>
  requires(!std::is_same_v<X, InvalidOperation>)
InvalidOperation operator-(const X&, InvalidOperation) { return {}; }

namespace ad {

#define SHARDALG_AD_PASS_UNARY(op)                    \
  template <class... To, class... Rest>               \
  InvalidOperation op(InvalidOperation, const Rest&...) { \
    return {};                                        \
  }
SHARDALG_AD_PASS_UNARY(map)
SHARDALG_AD_PASS_UNARY(swiglu)
SHARDALG_AD_PASS_UNARY(softmax_rows)
SHARDALG_AD_PASS_UNARY(col_sum)
SHARDALG_AD_PASS_UNARY(row_sum)
SHARDALG_AD_PASS_UNARY(partial_sum)
SHARDALG_AD_PASS_UNARY(sum)
SHARDALG_AD_PASS_UNARY(dropout)
SHARDALG_AD_PASS_UNARY(all_reduce)
SHARDALG_AD_PASS_UNARY(all_gather)
SHARDALG_AD_PASS_UNARY(reduce_scatter)
SHARDALG_AD_PASS_UNARY(split)
SHARDALG_AD_PASS_UNARY(all_to_all)
SHARDALG_AD_PASS_UNARY(copy_to)
SHARDALG_AD_PASS_UNARY(reduce_from)
SHARDALG_AD_PASS_UNARY(to_invariant)
SHARDALG_AD_PASS_UNARY(to_partial)
SHARDALG_AD_PASS_UNARY(redistribute)
SHARDALG_AD_PASS_UNARY(norm)
SHARDALG_AD_PASS_UNARY(cross_entropy)
#undef SHARDALG_AD_PASS_UNARY

// binary ops: an invalid operand in either place
#define SHARDALG_AD_PASS_BINARY(op)                                   \
  template <class... To, class X>                                     \
  InvalidOperation op(InvalidOperation, const X&) {                   \
    return {};                                                        \
  }                                                                   \
  template <class... To, class X>                                     \
    requires(!std::is_same_v<X, InvalidOperation>)                    \
  InvalidOperation op(const X&, InvalidOperation) {                   \
    return {};                                                        \
  }
SHARDALG_AD_PASS_BINARY(matmul)
SHARDALG_AD_PASS_BINARY(hadamard)
SHARDALG_AD_PASS_BINARY(add_bias)
#undef SHARDALG_AD_PASS_BINARY

}  // namespace ad
}  // namespace shardalg
