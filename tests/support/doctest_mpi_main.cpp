// doctest under MPI: every rank runs every test case; a failure on any rank fails the run.
// Only rank 0 reports unless a rank fails (then that rank prints its failures too). The replica
// check and checked collectives (shardalg/base/checks.hpp) are on for every test, whatever the build type.
#define DOCTEST_CONFIG_IMPLEMENT
#include <mpi.h>

#include <doctest/doctest.h>

#include <cstdlib>

#include "shardalg/base/checks.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  shardalg::set_check_replicas(true);
  shardalg::set_check_collectives(true);
  // The watchdog's limit: generous on a loaded test machine, unless SHARDALG_COLLECTIVE_TIMEOUT says.
  if (!std::getenv("SHARDALG_COLLECTIVE_TIMEOUT")) shardalg::set_collective_timeout(60);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("minimal", true);  // other ranks print only failures
  int failed = ctx.run() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
