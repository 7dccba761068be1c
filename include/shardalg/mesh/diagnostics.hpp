// shardalg/mesh/diagnostics.hpp — the compile errors of multi-axis tensors (the IDs continue the
// catalog of core/errors.hpp; E160 is in mesh/axis.hpp).
//
//   E161  a collective on an axis that is not the innermost split of its dimension
//   E162  a matmul that would need a free slice on some axis (R · Row or C · R there)
//   E163  operands whose axes differ (other axes, or the same axes in another order)
//   E164  a view onto one axis while another axis is still split or Partial
//   E165  an axis the tensor does not live on
//   E130  a parameter update with a gradient still Partial on some axis (dp: the forgotten sync)
#pragma once

#include "shardalg/mesh/axis.hpp"

namespace shardalg {

enum class MeshDiag : int {
  not_innermost = 161,
  needs_slice = 162,
  axes_differ = 163,
  view_not_alone = 164,
  unknown_axis = 165,
  update_partial_on_axis = 130,
};

/// Fires the assertion with ID D; `Dependent...` keep it on the invalid path only (see diagnose()).
template <MeshDiag D, class... Dependent>
constexpr auto diagnose_mesh() {
  constexpr int id = static_cast<int>(D);
  static_assert(detail::dependent_false<Dependent...> || id != 161,
                "[shardalg.E161] this collective runs on an axis whose split of the dimension is not the "
                "innermost: another axis later in the tensor's axis list splits the same dimension, so the "
                "blocks of this axis are interleaved with its blocks (the wrong full_tensor of TP+FSDP). "
                "Fix: gather (all_gather) the inner axis first, or order the axes so this one is innermost.");
  static_assert(detail::dependent_false<Dependent...> || id != 162,
                "[shardalg.E162] mesh matmul: on some axis the one-axis rule is R · Row or C · R, a free slice "
                "of the replicated operand, which the mesh product does not take implicitly. Fix: "
                "split<axis, layout>(x) the replicated operand on that axis first (free), so the rule is C · Row.");
  static_assert(detail::dependent_false<Dependent...> || id != 163,
                "[shardalg.E163] the operands live on different mesh axes, or on the same axes in another "
                "order (the order is the nesting of splits of one dimension). Fix: build both with the same "
                "Axes<On<...>...> list.");
  static_assert(detail::dependent_false<Dependent...> || id != 164,
                "[shardalg.E164] view<A>(x): every other axis must be Replicated (or Invariant) for x to be one "
                "tensor on axis A's group. Fix: all_gather / all_reduce the other axes first.");
  static_assert(detail::dependent_false<Dependent...> || id != 165,
                "[shardalg.E165] the tensor does not live on this mesh axis (it is not in its Axes<On<...>> "
                "list). Fix: name one of its axes, or stack<Axis, Layout>(group, x) to add it.");
  static_assert(detail::dependent_false<Dependent...> || id != 130,
                "[shardalg.E130] parameter update with a gradient that is still Partial on a mesh axis (on dp: "
                "each data-parallel replica holds only its batch's contribution, so the replicas would "
                "diverge). Fix: all_reduce<dp>(grad) first, or the sharded optimizer (reduce-scatter on dp).");
  return InvalidOperation{};
}

}  // namespace shardalg
