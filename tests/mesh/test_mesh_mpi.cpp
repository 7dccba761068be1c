// The mesh laws under mpirun -np 4 (MPI_Comm_split): the same cases as on threads.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "mesh_cases.hpp"

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
