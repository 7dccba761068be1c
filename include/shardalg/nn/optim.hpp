// shardalg/nn/optim.hpp — the parameter update, where the gradient's layout is checked once more.
//
//   sgd_update(W[L], dW[L], lr)        W := W − lr·dW, locally (the shards line up)
//   sgd_update(γ[R], dγ[Partial], lr)  compile error E130: the gradient still holds per-rank
//                                      summands (e.g. a LayerNorm weight on row-sharded tokens);
//                                      all_reduce it first
//   sgd_update(W[C], dW[Row], lr)      compile error E131: the layouts differ
#pragma once

#include <type_traits>

#include "shardalg/core/elementwise.hpp"

namespace shardalg::nn {

template <class T, class LP, class LG, class B>
auto sgd_update(Sharded<T, LP, B>& param, const Sharded<T, LG, B>& grad, T lr) {
  if constexpr (std::is_same_v<LG, Partial>) {
    return diagnose<Diag::update_partial_grad>();
  } else if constexpr (!std::is_same_v<LP, LG>) {
    return diagnose<Diag::update_layout>();
  } else {
    param = param - lr * grad;  // shape and group checked by the subtraction
  }
}

}  // namespace shardalg::nn
