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
// rank constructs it, with the same axes. That is checked first: one all-reduce over `world` of
// 2·P integers (each rank's slot: a 64-bit fingerprint of its axis names and sizes, and the length
// of their text; verification traffic, which no ledger counts). Where a rank's fingerprint differs
// from rank 0's, every rank gathers the texts in one more all-reduce and throws the same MeshError,
// naming what that rank declared and what rank 0 declared. A ledgered world gives ledgered axis
// groups on the same ledger, and each entry records its axis ("dp", "tp"). Bad meshes are
// MeshError naming the values; a product of axis sizes past 2^63 − 1 is one too (not a wrapped
// product).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
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
    if (!world_.valid()) throw EmptyTensorError("Mesh: the world is an empty Group (default-constructed, no communicator)");
    agree();  // a collective: every rank takes part before any rank throws
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
  [[nodiscard]] std::string describe() const { return describe(axes_); }

 private:
  static std::string describe(const std::vector<AxisSpec>& axes) {
    std::string s;
    for (const auto& a : axes) s += detail::cat(s.empty() ? "" : " × ", a.name, "=", a.size);
    return s;
  }

  /// FNV-1a over the axis count, then each axis's name length, name bytes and size.
  [[nodiscard]] std::int64_t fingerprint() const {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](const void* p, std::size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
    };
    const std::uint64_t count = axes_.size();
    mix(&count, sizeof count);
    for (const auto& a : axes_) {
      const std::uint64_t len = a.name.size();
      const std::int64_t size = a.size;
      mix(&len, sizeof len);
      mix(a.name.data(), a.name.size());
      mix(&size, sizeof size);
    }
    std::int64_t out = 0;
    std::memcpy(&out, &h, sizeof out);
    return out;
  }

  /// Every rank declared the axes rank 0 did (else MeshError on every rank). An all-gather written
  /// as an all-reduce of zero-padded slots, so that every backend takes it on host memory.
  void agree() const {
    const int p = world_.size(), me = world_.rank();
    if (p == 1) return;
    const CallInfo info{"-", "-", true};
    Group w = world_;
    const std::string text = axes_.empty() ? std::string("no axes") : describe();
    std::vector<std::int64_t> slots(2 * static_cast<std::size_t>(p), 0);  // [fingerprint, text bytes] per rank
    slots[2 * static_cast<std::size_t>(me)] = fingerprint();
    slots[2 * static_cast<std::size_t>(me) + 1] = static_cast<std::int64_t>(text.size());
    w.all_reduce(slots.data(), slots.size(), ReduceOp::sum, info);
    int first = 0, differ = 0;
    std::int64_t longest = 0;
    for (int r = 0; r < p; ++r) {
      const std::size_t i = 2 * static_cast<std::size_t>(r);
      longest = std::max(longest, slots[i + 1]);
      if (slots[i] != slots[0] || slots[i + 1] != slots[1]) {
        if (differ++ == 0) first = r;
      }
    }
    if (differ == 0) return;
    // The texts, in 8-byte words (every rank computed the same `longest`).
    const std::size_t words = static_cast<std::size_t>((longest + 7) / 8);
    std::vector<std::int64_t> all(words * static_cast<std::size_t>(p), 0);
    std::memcpy(all.data() + words * static_cast<std::size_t>(me), text.data(), text.size());
    w.all_reduce(all.data(), all.size(), ReduceOp::sum, info);
    auto text_of = [&](int r) {
      return std::string(reinterpret_cast<const char*>(all.data() + words * static_cast<std::size_t>(r)),
                         static_cast<std::size_t>(slots[2 * static_cast<std::size_t>(r) + 1]));
    };
    throw MeshError(detail::cat("Mesh: the ranks declare different meshes: rank ", first, " declares ", text_of(first),
                                " but rank 0 declares ", text_of(0), " (", differ, " of ", p,
                                " ranks differ from rank 0); every rank must build the Mesh with the same axes"));
  }

  void check() const {
    using detail::cat;
    if (axes_.empty()) throw MeshError("Mesh: no axes; give at least one {name, size}");
    long long product = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      const auto& a = axes_[i];
      if (a.name.empty()) throw MeshError(cat("Mesh: axis ", i, " has an empty name"));
      if (a.size < 1) throw MeshError(cat("Mesh: axis \"", a.name, "\" has size ", a.size, "; every axis needs at least 1 rank"));
      for (std::size_t j = 0; j < i; ++j)
        if (axes_[j].name == a.name) throw MeshError(cat("Mesh: axis \"", a.name, "\" is named twice"));
      overflow = overflow || __builtin_mul_overflow(product, static_cast<long long>(a.size), &product);
    }
    if (overflow)
      throw MeshError(cat("Mesh: axis sizes ", describe(), " multiply to more than ", std::numeric_limits<long long>::max(),
                          " (overflow), not the world size ", world_.size()));
    if (product != world_.size())
      throw MeshError(cat("Mesh: axis sizes ", describe(), " = ", product, " do not match the world size ", world_.size()));
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
