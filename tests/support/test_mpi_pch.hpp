// tests/support/test_mpi_pch.hpp — the MPI tests' precompiled header: the tests' own
// (test_pch.hpp) and the MPI communicator.
#pragma once

#include <shardalg/mpi.hpp>

#include "test_pch.hpp"
