// The mesh laws under mpirun -np 4 (MPI_Comm_split): the same cases as on threads.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "mesh_cases.hpp"
#include "mesh_laws.hpp"

using namespace shardalg;

TEST_CASE("mesh under MPI: 2x2 and 4x1 and 1x4 axis groups combine exactly their ranks") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 4);
  mesh_cases::check_axes(world, {{"dp", 2}, {"tp", 2}});
  mesh_cases::check_axes(world, {{"dp", 4}, {"tp", 1}});
  mesh_cases::check_axes(world, {{"pp", 1}, {"tp", 4}});
}

TEST_CASE("mesh under MPI: a bad mesh is MeshError on every rank, with the values") {
  MpiComm world(MPI_COMM_WORLD);
  CHECK_THROWS_WITH_AS(Mesh(world, {{"dp", 3}, {"tp", 2}}),
                       "Mesh: axis sizes dp=3 × tp=2 = 6 do not match the world size 4", MeshError);
}

TEST_CASE("mesh laws under MPI (2x2): every layout pair gathers back, every redistribution keeps it, every product") {
  MpiComm world(MPI_COMM_WORLD);
  Ledger ledger;
  Mesh mesh(ledgered(Group(world), ledger), {{"dp", 2}, {"tp", 2}});
  mesh_laws::all_pairs<dp, tp>(mesh, ledger, 100);
  mesh_laws::all_pairs<tp, dp>(mesh, ledger, 200);
  mesh_laws::all_matmuls<dp, tp>(Mesh(Group(world), {{"dp", 2}, {"tp", 2}}), 300);
}
