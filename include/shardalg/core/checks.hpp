// shardalg/core/checks.hpp — the switch of the replica check (no Eigen, no communicator here).
//
// A Replicated tensor must hold the same value on every rank. shard<Replicated>(A, g) takes A as
// this rank's copy without communicating, so a program that builds A differently on different
// ranks (random data generated inside each rank, a rank-dependent file) gets a tensor that is
// not replicated, and wrong results later, far from the cause. With the replica check on,
// shard<Replicated> compares the ranks' copies (shape and a 64-bit hash of the bytes, in one
// all-reduce of 3·P integers, verification traffic that the ledger does not count) and throws
// ReplicaMismatchError naming the shape and the first rank that differs from rank 0.
// distribute<L>(A, g, src_rank) (core/dense.hpp) is the way to build a tensor from one rank's
// data; with the check on it also verifies that every rank names the same src_rank.
//
//   set_check_replicas(true);                  // from now on, in this process
//   { ReplicaCheck on(true); ... }             // for a scope; the previous setting comes back
//   check_replicas()                           // the current setting
//
// The default: on when NDEBUG is not defined (debug builds), off otherwise. The setting is one
// per process (every thread reads it): every rank of a group must have the same setting when it
// calls shard<Replicated> (the check is a collective), so change it before ranks start, not
// while they run. The test mains (tests/support/doctest_main.cpp, doctest_mpi_main.cpp) turn it
// on for every test.
#pragma once

#include <atomic>

namespace shardalg {

namespace detail {
#ifdef NDEBUG
constexpr bool replica_check_default = false;
#else
constexpr bool replica_check_default = true;
#endif
/// −1: the build's default; 0: off; 1: on.
inline std::atomic<int>& replica_check_state() {
  static std::atomic<int> state{-1};
  return state;
}
}  // namespace detail

/// Whether shard<Replicated> verifies that the ranks' copies agree.
inline bool check_replicas() {
  const int s = detail::replica_check_state().load(std::memory_order_relaxed);
  return s < 0 ? detail::replica_check_default : s != 0;
}

/// Turn the replica check on or off for the whole process.
inline void set_check_replicas(bool on) { detail::replica_check_state().store(on ? 1 : 0, std::memory_order_relaxed); }

/// RAII: the replica check on (or off) while it lives; the previous setting after.
class ReplicaCheck {
 public:
  explicit ReplicaCheck(bool on) : saved_(detail::replica_check_state().exchange(on ? 1 : 0)) {}
  ReplicaCheck(const ReplicaCheck&) = delete;
  ReplicaCheck& operator=(const ReplicaCheck&) = delete;
  ~ReplicaCheck() { detail::replica_check_state().store(saved_); }

 private:
  int saved_;
};

}  // namespace shardalg
