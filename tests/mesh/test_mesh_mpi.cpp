// The mesh laws under mpirun -np 4 (MPI_Comm_split): the same cases as on threads.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include <vector>

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

TEST_CASE("mesh under MPI: ranks that declare different axes get the same MeshError on every rank, none hangs") {
  MpiComm world(MPI_COMM_WORLD);
  const std::vector<AxisSpec> odd = {{"dp", 4}, {"tp", 1}}, axes = {{"dp", 2}, {"tp", 2}};
  CHECK_THROWS_WITH_AS(Mesh(world, world.rank() == 2 ? odd : axes),
                       "Mesh: the ranks declare different meshes: rank 2 declares dp=4 × tp=1 but rank 0 declares "
                       "dp=2 × tp=2 (1 of 4 ranks differ from rank 0); every rank must build the Mesh with the same axes",
                       MeshError);
  // Fewer axes on rank 3 (it would split fewer times) and a bad mesh of its own on rank 1.
  const std::vector<AxisSpec> one = {{"dp", 4}}, bad = {{"dp", 3}, {"tp", 1}};
  CHECK_THROWS_WITH_AS(Mesh(world, world.rank() == 3 ? one : world.rank() == 1 ? bad : axes),
                       "Mesh: the ranks declare different meshes: rank 1 declares dp=3 × tp=1 but rank 0 declares "
                       "dp=2 × tp=2 (2 of 4 ranks differ from rank 0); every rank must build the Mesh with the same axes",
                       MeshError);
  // The world still works afterwards: a good mesh on every rank.
  Mesh mesh(world, axes);
  CHECK(mesh.size("dp") == 2);
}

TEST_CASE("mesh under MPI: axis sizes whose product overflows (2^64 + 4) are MeshError, not a division by zero") {
  MpiComm world(MPI_COMM_WORLD);
  CHECK_THROWS_WITH_AS(Mesh(world, {{"a", 4}, {"b", 5}, {"c", 5581}, {"d", 8681}, {"e", 49477}, {"f", 384773}}),
                       "Mesh: axis sizes a=4 × b=5 × c=5581 × d=8681 × e=49477 × f=384773 multiply to more than "
                       "9223372036854775807 (overflow), not the world size 4",
                       MeshError);
}

TEST_CASE("mesh laws under MPI (2x2): every layout pair gathers back, every redistribution keeps it, every product") {
  MpiComm world(MPI_COMM_WORLD);
  Ledger ledger;
  Mesh mesh(ledgered(Group(world), ledger), {{"dp", 2}, {"tp", 2}});
  mesh_laws::all_pairs<dp, tp>(mesh, ledger, 100);
  mesh_laws::all_pairs<tp, dp>(mesh, ledger, 200);
  mesh_laws::all_matmuls<dp, tp>(Mesh(Group(world), {{"dp", 2}, {"tp", 2}}), 300);
}
