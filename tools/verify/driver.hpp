// tools/verify/driver.hpp — one run of shardalg-verify: the ranks (threads, or this MPI process),
// the progress line, the report on stdout, the trace file.
#pragma once

#include "options.hpp"
#include "shardalg/comm/communicator.hpp"

namespace sv {

/// Runs the model of `o` on `p` ranks — ThreadComm ranks in this process, or, given `mpi_world`,
/// this process as rank `mpi_rank` — and prints the report on rank 0. Returns the exit status:
/// 0 when every check passes, 1 when one fails.
int run(const Options& o, int p, shardalg::Group* mpi_world, int mpi_rank);

/// True under mpirun/mpiexec (their environment variables are set).
bool under_mpirun();

}  // namespace sv
