// shardalg/cost/recompute.hpp — activation recomputation: what a transformer block keeps from its
// forward for its backward (the cost model's activation formulas and nn's blocks both take it).
//
//   none       every activation the backward reads
//   selective  all but the attention core's (QKᵀ, softmax, its dropout, ·V), recomputed in the
//              backward — Korthikanti et al. 2022's choice: the 5as/h term vanishes
//   full       the block's input only; the backward runs the forward again
#pragma once

#include <string_view>

namespace shardalg::cost {

enum class Recompute { none, selective, full };

constexpr std::string_view to_string(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

}  // namespace shardalg::cost
