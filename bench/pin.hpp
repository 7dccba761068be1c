// bench/pin.hpp — pin the calling thread to one core. bench/run starts the MPI processes
// unbound (`--bind-to none`) so that a process running thread ranks may use every core; each
// MPI rank pins its main thread to core = rank, and each thread rank to core = its rank.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <thread>

namespace bench {
inline void pin_this_thread(int core) {
  const unsigned n = std::thread::hardware_concurrency();
  if (n == 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<unsigned>(core) % n, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}
}  // namespace bench
