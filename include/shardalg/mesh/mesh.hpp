// shardalg/mesh/mesh.hpp — a mesh of named axes over any communicator.
//
//   Mesh mesh(world, {{"dp", 2}, {"tp", 2}});   // 4 ranks: a 2 × 2 mesh
//   AxisGroup<tp> t = mesh.axis<tp>();           // this rank's tensor-parallel group
//   Group d = mesh.group("dp");                  // the same, untyped
//
// Rank order: the axes are listed outermost first and the last one varies fastest, so with
// (dp, pp, tp) tensor parallelism is fastest, as in Megatron:
//
//   world rank = ((c_dp · size_pp) + c_pp) · size_tp + c_tp
//
//   dp × tp = 2 × 2:   rank  0  1  2  3
//                      c_dp  0  0  1  1      dp groups {0, 2} and {1, 3}
//                      c_tp  0  1  0  1      tp groups {0, 1} and {2, 3}
//
// Each axis's group comes from the backend's split (MPI_Comm_split; ThreadComm::split and the
// simulated CUDA world on threads): constructing a Mesh is a collective over `world`, so every
// rank constructs it, with the same axes. A ledgered world gives ledgered axis groups on the same
// ledger, and each entry records its axis ("dp", "tp"). Bad meshes are MeshError naming the values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/mesh/axis.hpp"

namespace shardalg {

/// A mesh that cannot be built on this world, or a query for an axis it does not have.
struct MeshError : Error {
  using Error::Error;
};

struct AxisSpec {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  Mesh() = default;

  /// Split `world` into the axes (outermost first). Throws MeshError when the sizes do not
  /// multiply to the world size, an axis is smaller than 1, or a name is empty or repeated.
  Mesh(Group world, std::vector<AxisSpec> axes) : world_(std::move(world)), axes_(std::move(axes)) {
    check();
    const int rank = world_.rank();
    int stride = world_.size();
    for (const auto& a : axes_) {
      stride /= a.size;
      const int c = (rank / stride) % a.size;
      coords_.push_back(c);
      // The ranks that agree on every other coordinate share a color; ranked by this coordinate.
      groups_.push_back(world_.split(rank - c * stride, c, a.name));
    }
  }

  [[nodiscard]] const Group& world() const { return world_; }
  [[nodiscard]] const std::vector<AxisSpec>& axes() const { return axes_; }
  [[nodiscard]] int rank() const { return world_.rank(); }
  [[nodiscard]] int size() const { return world_.size(); }
  [[nodiscard]] bool has(std::string_view axis) const { return find(axis) < axes_.size(); }

  /// The size of an axis, this rank's coordinate on it, and its group (MeshError when unknown).
  [[nodiscard]] int size(std::string_view axis) const { return axes_[index(axis)].size; }
  [[nodiscard]] int coord(std::string_view axis) const { return coords_[index(axis)]; }
  [[nodiscard]] const Group& group(std::string_view axis) const { return groups_[index(axis)]; }

  /// The group of axis A, typed (AxisGroup<A>: passing it where another axis's is expected is E160).
  template <MeshAxis A>
  [[nodiscard]] AxisGroup<A> axis() const {
    return AxisGroup<A>(group(A::name));
  }

  /// "dp=2 × tp=2".
  [[nodiscard]] std::string describe() const {
    std::string s;
    for (const auto& a : axes_) s += detail::cat(s.empty() ? "" : " × ", a.name, "=", a.size);
    return s;
  }

 private:
  void check() const {
    using detail::cat;
    if (!world_.valid()) throw EmptyTensorError("Mesh: the world is an empty Group (default-constructed, no communicator)");
    if (axes_.empty()) throw MeshError("Mesh: no axes; give at least one {name, size}");
    long long product = 1;
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      const auto& a = axes_[i];
      if (a.name.empty()) throw MeshError(cat("Mesh: axis ", i, " has an empty name"));
      if (a.size < 1) throw MeshError(cat("Mesh: axis \"", a.name, "\" has size ", a.size, "; every axis needs at least 1 rank"));
      for (std::size_t j = 0; j < i; ++j)
        if (axes_[j].name == a.name) throw MeshError(cat("Mesh: axis \"", a.name, "\" is named twice"));
      product *= a.size;
    }
    if (product != world_.size()) {
      std::string sizes;
      for (const auto& a : axes_) sizes += cat(sizes.empty() ? "" : " × ", a.name, "=", a.size);
      throw MeshError(cat("Mesh: axis sizes ", sizes, " = ", product, " do not match the world size ", world_.size()));
    }
  }
  [[nodiscard]] std::size_t find(std::string_view axis) const {
    for (std::size_t i = 0; i < axes_.size(); ++i)
      if (axes_[i].name == axis) return i;
    return axes_.size();
  }
  [[nodiscard]] std::size_t index(std::string_view axis) const {
    const std::size_t i = find(axis);
    if (i == axes_.size()) throw MeshError(detail::cat("Mesh: no axis \"", axis, "\" in the mesh ", describe()));
    return i;
  }

  Group world_;
  std::vector<AxisSpec> axes_;
  std::vector<int> coords_;
  std::vector<Group> groups_;
};

}  // namespace shardalg
