// shardalg/mpi.hpp — the umbrella header plus the MPI communicator and run_mpi, the main that
// ends every rank when one throws (link shardalg::mpi).
#pragma once

#include "shardalg/shardalg.hpp"
#include "shardalg/comm/mpi.hpp"
#include "shardalg/comm/run_mpi.hpp"
