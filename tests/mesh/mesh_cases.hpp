// The mesh laws every backend must satisfy, run by tests/mesh/test_mesh.cpp (threads) and
// test_mesh_mpi.cpp (mpirun). Expected values come from the rank-order formula written out here,
// not from Mesh: world rank = ((c0 · s1) + c1) · s2 + c2, the last axis fastest.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <shardalg/shardalg.hpp>

namespace mesh_cases {

/// The coordinates of world rank `r` in a mesh of `sizes` (outermost first).
inline std::vector<int> coords_of(int r, const std::vector<int>& sizes) {
  std::vector<int> c(sizes.size());
  for (std::size_t i = sizes.size(); i-- > 0;) {
    c[i] = r % sizes[i];
    r /= sizes[i];
  }
  return c;
}

/// Every world rank that shares all coordinates but axis `a` with `me`, in order of that axis.
inline std::vector<int> axis_members(int me, std::size_t a, const std::vector<int>& sizes) {
  int world = 1;
  for (int s : sizes) world *= s;
  const auto mine = coords_of(me, sizes);
  std::vector<int> out;
  for (int r = 0; r < world; ++r) {
    auto c = coords_of(r, sizes);
    c[a] = mine[a];
    if (c == mine) out.push_back(r);
  }
  return out;
}

/// On one rank: build the mesh on a ledgered world, check each axis's coordinate, size, rank,
/// and that an all_reduce / all_gather over the axis combines exactly that axis's ranks; the
/// ledger records each call with its axis name.
inline void check_axes(shardalg::Group world, const std::vector<shardalg::AxisSpec>& axes) {
  using namespace shardalg;
  Ledger ledger;
  Group g = ledgered(world, ledger);
  Mesh mesh(g, axes);
  std::vector<int> sizes;
  for (const auto& a : axes) sizes.push_back(a.size);
  const int me = g.rank();
  const auto want = coords_of(me, sizes);
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const std::string& name = axes[a].name;
    const auto members = axis_members(me, a, sizes);
    CHECK(mesh.coord(name) == want[a]);
    CHECK(mesh.size(name) == axes[a].size);
    Group ag = mesh.group(name);
    CHECK(ag.size() == axes[a].size);
    CHECK(ag.rank() == want[a]);
    CHECK(ag.axis() == name);
    // all_reduce over the axis: Σ of (world rank + 1)² over exactly its members.
    std::int64_t mine = (me + 1) * (me + 1), expect = 0;
    for (int r : members) expect += static_cast<std::int64_t>(r + 1) * (r + 1);
    ag.all_reduce(&mine, 1);
    CHECK(mine == expect);
    // all_gather over the axis: the members' world ranks, in axis order.
    std::vector<std::int64_t> got(members.size());
    const std::int64_t id = me;
    ag.all_gather(&id, got.data(), 1);
    for (std::size_t i = 0; i < members.size(); ++i) CHECK(got[i] == members[i]);
  }
  // The ledger holds one all_reduce and one all_gather per axis, in order, each naming its axis.
  const auto entries = ledger.select();
  REQUIRE(entries.size() == 2 * axes.size());
  for (std::size_t a = 0; a < axes.size(); ++a) {
    CHECK(entries[2 * a].kind == CollectiveKind::all_reduce);
    CHECK(entries[2 * a].axis == axes[a].name);
    CHECK(entries[2 * a].group_size == axes[a].size);
    CHECK(entries[2 * a + 1].kind == CollectiveKind::all_gather);
    CHECK(entries[2 * a + 1].axis == axes[a].name);
  }
}

}  // namespace mesh_cases
