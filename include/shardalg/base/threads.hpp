// shardalg/base/threads.hpp — the local thread budget: ranks × threads never exceed the cores.
//
// Each rank's local GEMM may use several threads (OpenBLAS, Eigen). With P ranks on one machine
// that oversubscribes the cores unless the budget is split: `local_threads_for(P)` is
// max(1, cores / P), unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise (the user's
// explicit choice wins). run_ranks applies it for the duration of the run; an MPI program calls
// `set_local_threads(local_threads_for(ranks_on_this_node))` (see MpiComm::ranks_on_node()).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <thread>

#if defined(SHARDALG_HAVE_OPENBLAS)
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}
#endif

namespace shardalg {

inline int local_threads_for(int ranks_on_node) {
  for (const char* var : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 0) return std::atoi(v);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks_on_node));
}

/// The current per-rank thread count of the local GEMM.
inline int local_threads() {
#if defined(SHARDALG_HAVE_OPENBLAS)
  return openblas_get_num_threads();
#else
  return Eigen::nbThreads();
#endif
}

/// Set the threads of the local GEMM (OpenBLAS when linked, and Eigen's own kernel).
inline void set_local_threads(int n) {
#if defined(SHARDALG_HAVE_OPENBLAS)
  openblas_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

}  // namespace shardalg
