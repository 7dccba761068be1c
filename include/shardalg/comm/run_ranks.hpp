// shardalg/comm/run_ranks.hpp — run_ranks(n, fn): n ThreadComm ranks, one thread each. When a
// rank throws, the world is aborted and run_ranks rethrows the first rank's own exception once
// every thread has ended; a thread that cannot be started is a ThreadStartError.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "shardalg/comm/thread.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/threads.hpp"

namespace shardalg {

namespace detail {
/// Test hook: when ≥ 1, starting the thread of that rank fails as std::thread does when the
/// system has no threads left (std::system_error, EAGAIN). −1: off.
inline std::atomic<int>& fail_thread_start_at() {
  static std::atomic<int> rank{-1};
  return rank;
}

/// Run `body(r)` for r = 0..n−1 on n threads (rank 0 on the caller's). When a rank throws,
/// `abort()` releases the others; afterwards the first rank's own exception is rethrown — a
/// CommError too — in preference to the CommAbortedErrors ("another rank failed") that the abort
/// caused. When a thread cannot be started, the ones started are aborted and joined, and the
/// result is a ThreadStartError naming the rank (never std::terminate).
template <class Body, class Abort>
void run_threads(int n, Body&& body, Abort&& abort) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<char> aborted_only(n, 0);
  auto guarded = [&](int r) {
    try {
      body(r);
    } catch (const CommAbortedError&) {
      errors[r] = std::current_exception();
      aborted_only[r] = 1;
      abort();
    } catch (...) {
      errors[r] = std::current_exception();
      abort();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  std::string start_error;
  for (int r = 1; r < n && start_error.empty(); ++r) {
    try {
      if (fail_thread_start_at().load(std::memory_order_relaxed) == r)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "injected (detail::fail_thread_start_at)");
      threads.emplace_back(guarded, r);
    } catch (const std::system_error& e) {
      start_error = cat("run_ranks: could not start the thread of rank ", r, " of ", n, ": ", e.what());
      abort();
    }
  }
  if (start_error.empty()) guarded(0);
  for (auto& t : threads) t.join();
  if (!start_error.empty()) throw ThreadStartError(start_error);
  for (int r = 0; r < n; ++r)
    if (errors[r] && !aborted_only[r]) std::rethrow_exception(errors[r]);
  for (int r = 0; r < n; ++r)
    if (errors[r]) std::rethrow_exception(errors[r]);
}
}  // namespace detail

/// Run `fn(ThreadComm&)` on `n` threads, ranks 0..n−1; rethrow the first rank's exception.
/// For the duration of the run the local GEMM gets local_threads_for(n) threads per rank.
/// With checked collectives on, the end of each rank's body is a checked rendezvous too.
template <class Fn>
void run_ranks(int n, Fn&& fn) {
  if (n < 1) throw CommError(detail::cat("run_ranks: world size ", n, " must be at least 1"));
  struct Budget {
    int saved = local_threads();
    explicit Budget(int n) { set_local_threads(local_threads_for(n)); }
    ~Budget() { set_local_threads(saved); }
  } budget(n);
  auto world = std::make_shared<detail::ThreadWorld>(n);
  try {
    detail::run_threads(
        n,
        [&](int r) {
          ThreadComm comm(world, r);
          fn(comm);
          comm.end_of_body();
        },
        [&] { world->abort(); });
  } catch (const CommAbortedError&) {
    world->rethrow_dropped_failure();  // every rank was aborted: say by what, when it is known
    throw;
  }
}

}  // namespace shardalg
