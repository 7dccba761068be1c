// Shapes that do not divide by the process count, across processes: the laws of
// tests/unit/uneven_cases.hpp on MpiComm (mpirun -np 3: 7 rows as 3, 2, 2; 2 columns as 1, 1, 0).
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "../unit/uneven_cases.hpp"
#include "testing.hpp"

using namespace shardalg;

namespace {
// Sum a double over the world with raw MPI (not the communicator under test).
double world_sum(double v) {
  double s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s;
}
}  // namespace

TEST_CASE_TEMPLATE("MPI: uneven shapes, every redistribution and matmul<To> equal dense, adjoint laws, ledger counts", T,
                   double, float) {
  Group g = MpiComm(MPI_COMM_WORLD);
  const auto fails = uneven_cases::run<T>(g, world_sum);
  for (const auto& f : fails) FAIL_CHECK(f);
  CHECK(world_sum(static_cast<double>(fails.size())) == 0.0);
}
