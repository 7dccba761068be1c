// shardalg/mpi.hpp — the umbrella header plus the MPI communicator (link shardalg::mpi).
#pragma once

#include "shardalg/shardalg.hpp"
#include "shardalg/comm/mpi.hpp"
