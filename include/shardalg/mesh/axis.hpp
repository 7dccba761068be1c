// shardalg/mesh/axis.hpp — mesh axes as types, and groups typed by their axis.
//
//   struct dp, pp, cp, tp                  the built-in axes (data, pipeline, context, tensor parallel)
//   struct ep { static constexpr std::string_view name = "ep"; };   a user-defined axis
//   AxisGroup<tp> g = mesh.axis<tp>();     the tensor-parallel group of this rank
//
// An AxisGroup<A> is a Group that knows, in its type, which axis it spans. A function that needs
// the tensor-parallel group takes AxisGroup<tp>; handing it the pipeline group is a compile error
// [shardalg.E160] — the class of bug where a data-parallel all-reduce runs over the wrong group.
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardalg/base/diagnostics.hpp"
#include "shardalg/comm/communicator.hpp"

namespace shardalg {

/// A mesh axis: a type with a `name`.
template <class A>
concept MeshAxis = requires {
  { A::name } -> std::convertible_to<std::string_view>;
};

struct dp {
  static constexpr std::string_view name = "dp";
};
struct pp {
  static constexpr std::string_view name = "pp";
};
/// Context parallelism: the sequence split over cp (nn/layers/cp_tokens.hpp).
struct cp {
  static constexpr std::string_view name = "cp";
};
struct tp {
  static constexpr std::string_view name = "tp";
};

/// The group of one mesh axis, typed by the axis. Converts to Group (every op takes one); a group
/// of another axis does not convert to it.
template <MeshAxis A>
class AxisGroup {
 public:
  using axis = A;
  AxisGroup() = default;
  explicit AxisGroup(Group g) : g_(std::move(g)) {}

  /// [shardalg.E160] a group of axis B where one of axis A is expected.
  template <MeshAxis B>
    requires(!std::same_as<A, B>)
  AxisGroup(const AxisGroup<B>&) {  // NOLINT: implicit, so the mistake meets the diagnostic
    (void)diagnose<Diag::axis_group_mismatch, B>();
  }

  [[nodiscard]] const Group& group() const& { return g_; }
  [[nodiscard]] Group group() && { return std::move(g_); }
  operator const Group&() const { return g_; }  // NOLINT: an axis group is a group
  [[nodiscard]] int rank() const { return g_.rank(); }
  [[nodiscard]] int size() const { return g_.size(); }
  static constexpr std::string_view name() { return A::name; }

 private:
  Group g_;
};

}  // namespace shardalg
