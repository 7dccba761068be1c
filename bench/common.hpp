// bench/common.hpp — what the MPI benchmarks share: pinning, timing a collective step across
// processes, a barrier that does not spin, and main()'s set-up.
//
// bench/run starts the MPI processes unbound (`--bind-to none`) so that a process running thread
// ranks may use every core; each MPI rank pins its main thread to core = rank, and each thread
// rank to core = its rank.
#pragma once

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <sstream>
#include <vector>

namespace bench {

inline int world_rank = 0, world_size = 1;

/// Pin the calling thread to one core.
inline void pin_this_thread(int core) {
  const unsigned n = std::thread::hardware_concurrency();
  if (n == 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<unsigned>(core) % n, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/// One run of `op` between barriers on every process: the slowest process's seconds.
template <class Op>
double once(Op&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  op();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

/// Time each iteration of `op` between barriers on every process; report the slowest process
/// (manual time), so all processes run the same iteration counts. One untimed call first: the
/// first touch of the heap's pages and the libraries' own set-up are not a step's cost.
template <class Op>
void timed(benchmark::State& st, Op&& op) {
  once(op);
  for (auto _ : st) st.SetIterationTime(once(op));
}

/// A paired measurement: each iteration runs `ours` and `base` back to back (which goes first
/// alternates), each timed by once(), after one untimed call of each. The iteration's time is ours; the counter "vs_base" is
/// Σ ours / Σ base over the iterations, the ratio with the machine's slow drifts cancelled.
template <class Ours, class Base>
void paired(benchmark::State& st, Ours&& ours, Base&& base) {
  once(ours);  // untimed, as timed()
  once(base);
  double t_ours = 0, t_base = 0;
  bool ours_first = true;
  for (auto _ : st) {
    double t = 0;
    if (ours_first) {
      t = once(ours);
      t_base += once(base);
    } else {
      t_base += once(base);
      t = once(ours);
    }
    t_ours += t;
    ours_first = !ours_first;
    st.SetIterationTime(t);
  }
  st.counters["vs_base"] = t_base > 0 ? t_ours / t_base : 0;
}

/// A barrier that waits without spinning (Open MPI's MPI_Barrier busy-polls a core), and without
/// waking often: the sleep doubles from 0.2 ms to 20 ms. An idle process shares a core with a
/// working rank (the thread ranks of process 0 run on both cores), and waking every 0.2 ms cost
/// that rank several percent. Its latency (up to 20 ms) is never inside a timed region.
inline void idle_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  auto nap = std::chrono::microseconds(200);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(20000));
    }
  }
}

/// MPI_Init, pinning, benchmark::Initialize (only process 0 writes --benchmark_out).
inline void init(int& argc, char**& argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  pin_this_thread(world_rank);
  static std::vector<char*> args(argv, argv + argc);
  static std::string devnull = "--benchmark_out=/dev/null";
  if (world_rank != 0) args.push_back(devnull.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
}

/// Run the registered benchmarks (other processes silently), wait without spinning, finalize.
inline void run_and_finalize() {
  if (world_rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    benchmark::ConsoleReporter quiet;
    std::ostringstream sink;
    quiet.SetOutputStream(&sink);
    quiet.SetErrorStream(&sink);
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  idle_barrier();
  benchmark::Shutdown();
  MPI_Finalize();
}

}  // namespace bench
