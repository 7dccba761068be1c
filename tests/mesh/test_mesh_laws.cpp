// The MeshSharded laws on thread meshes (issue 13): 2×2, 2×3, 3×2 and 2×2×2. Every combination of
// the five layouts on two axes, in both nesting orders, gathers back to its dense value; every
// redistribution on every axis keeps it and is ledgered once with its axis; every product of
// direct rules equals the dense product. The dense values are assembled independently
// (mesh_laws.hpp); int64 values make the checks bit-exact.
#include <doctest/doctest.h>

#include "mesh_laws.hpp"

using namespace shardalg;

namespace {
struct ep {
  static constexpr std::string_view name = "ep";  // a user-defined axis
};
}  // namespace

TEST_CASE("mesh laws: every layout pair on dp x tp and tp x dp gathers back; every redistribution keeps it") {
  for (const auto& dt : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    const int d = dt.first, t = dt.second;  // no structured binding: lambdas capture them (Clang 14)
    CAPTURE(d);
    CAPTURE(t);
    run_ranks(d * t, [&](ThreadComm& comm) {
      Ledger ledger;
      Mesh mesh(ledgered(comm, ledger), {{"dp", d}, {"tp", t}});
      mesh_laws::all_pairs<dp, tp>(mesh, ledger, 100);
      mesh_laws::all_pairs<tp, dp>(mesh, ledger, 200);  // the other nesting order
    });
  }
}

TEST_CASE("mesh laws: three axes (2x2x2), a user-defined axis, and the nesting order of one dimension") {
  run_ranks(8, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(comm, ledger), {{"dp", 2}, {"pp", 2}, {"ep", 2}});
    using namespace mesh_laws;
    layout_case<Axes<On<dp, RowSharded>, On<pp, RowSharded>, On<ep, RowSharded>>>(mesh, ledger, 1);
    layout_case<Axes<On<ep, RowSharded>, On<dp, RowSharded>, On<pp, ColSharded>>>(mesh, ledger, 2);
    layout_case<Axes<On<dp, Partial>, On<pp, ColSharded>, On<ep, Partial>>>(mesh, ledger, 3);
    layout_case<Axes<On<dp, Invariant>, On<pp, Partial>, On<ep, RowSharded>>>(mesh, ledger, 4);
    layout_case<Axes<On<dp, Replicated>, On<pp, Invariant>, On<ep, ColSharded>>>(mesh, ledger, 5);
    layout_case<Axes<On<pp, ColSharded>, On<dp, ColSharded>, On<ep, Replicated>>>(mesh, ledger, 6);
    all_pairs<dp, ep>(Mesh(ledgered(comm, ledger), {{"dp", 2}, {"ep", 4}}), ledger, 7);
  });
  // The nesting order is the type's: X[dp:Row, tp:Row] puts rank (d, t) at row block 2d + t,
  // X[tp:Row, dp:Row] at 2t + d; one rank's data lands in different rows of the dense value.
  run_ranks(4, [](ThreadComm& comm) {
    Mesh mesh(Group(comm), {{"dp", 2}, {"tp", 2}});
    const auto fill = CpuBackend::matrix<double>::Constant(1, 1, comm.rank());  // world rank = 2d + t
    const MeshSharded<double, Axes<On<dp, RowSharded>, On<tp, RowSharded>>> a(fill, 4, 1, mesh);
    const MeshSharded<double, Axes<On<tp, RowSharded>, On<dp, RowSharded>>> b(fill, 4, 1, mesh);
    const auto da = to_dense(a), db = to_dense(b);
    for (int d = 0; d < 2; ++d)
      for (int t = 0; t < 2; ++t) {
        CHECK(da(2 * d + t, 0) == 2 * d + t);
        CHECK(db(2 * t + d, 0) == 2 * d + t);
      }
  });
}

TEST_CASE("mesh laws: matmul axis by axis, every pair of direct rules on dp x tp (2x2, 3x2)") {
  for (const auto& dt : {std::pair{2, 2}, std::pair{3, 2}}) {
    const int d = dt.first, t = dt.second;
    CAPTURE(d);
    run_ranks(d * t, [&](ThreadComm& comm) {
      Mesh mesh(Group(comm), {{"dp", d}, {"tp", t}});
      mesh_laws::all_matmuls<dp, tp>(mesh, 300);
    });
  }
}
