// shardalg/comm/run_mpi.hpp — the main of an MPI program, so that an error on one rank ends all
// of them (opt-in with the MPI communicator: included by shardalg/mpi.hpp).
//
//   int main(int argc, char** argv) {
//     return shardalg::run_mpi(argc, argv, [](shardalg::MpiComm world) {
//       shardalg::Group g = world;
//       ...                                    // may return void or an int
//     });
//   }
//
// Why: under MPI an exception on one rank is that rank's alone. Uncaught, it ends that process
// through std::terminate, and every rank that throws prints its own report and backtrace; caught
// and returned from main, it leaves the other ranks waiting in their next collective for a rank
// that will never come, and the job hangs. run_mpi makes an error on any rank end the job:
//
//   - initialises MPI if it is not initialised yet (MPI_Init), and then finalizes it on success;
//     a caller that initialised MPI itself keeps it (run_mpi leaves it initialised);
//   - runs fn(MpiComm(MPI_COMM_WORLD));
//   - when fn throws on a rank, that rank prints ONE line to stderr,
//         shardalg: rank R: <what()>
//     (R its rank in MPI_COMM_WORLD; "unknown exception" for one not derived from
//     std::exception), flushes stdout and stderr and calls MPI_Abort(MPI_COMM_WORLD, 1): every
//     process of the job ends, and mpiexec exits non-zero. Nothing hangs, whichever collective
//     the other ranks wait in. (The launcher may add its own note about the abort.)
//   - on success returns fn's int, or 0 when fn returns void.
//
// tests/mpi/abort_on_error.cpp is the test: rank 1 throws while rank 0 waits in an all-gather.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <type_traits>
#include <utility>

#include "shardalg/comm/mpi.hpp"

namespace shardalg {

/// Run fn(MpiComm(MPI_COMM_WORLD)) with MPI initialised; an exception on any rank prints one line
/// from that rank and aborts the whole job (MPI_Abort, non-zero exit). Returns fn's int, or 0.
template <class Fn>
int run_mpi(int& argc, char**& argv, Fn&& fn) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    MpiComm world(MPI_COMM_WORLD);
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, MpiComm>>) {
      fn(std::move(world));
    } else {
      rc = static_cast<int>(fn(std::move(world)));
    }
  } catch (const std::exception& e) {
    detail::abort_world(e.what());
  } catch (...) {
    detail::abort_world("unknown exception");
  }
  if (!initialized) MPI_Finalize();
  return rc;
}

}  // namespace shardalg
