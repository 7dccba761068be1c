// shardalg/base/checks.hpp — the switches of the replica check and of checked collectives (no Eigen, no communicator here).
//
// A Replicated tensor must hold the same value on every rank. shard<Replicated>(A, g) takes A as
// this rank's copy without communicating, so a program that builds A differently on different
// ranks (random data generated inside each rank, a rank-dependent file) gets a tensor that is
// not replicated, and wrong results later, far from the cause. With the replica check on,
// shard<Replicated> compares the ranks' copies (shape and a 64-bit hash of the bytes, in one
// all-reduce of 3·P integers, verification traffic that the ledger does not count) and throws
// ReplicaMismatchError naming the shape and the first rank that differs from rank 0.
// distribute<L>(A, g, src_rank) (bridge/dense.hpp) is the way to build a tensor from one rank's
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
#include <cstdlib>

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


// ---------------------------------------------------------------------------------------------
// Checked collectives. With the check on, every collective of a group carries a
// fingerprint — kind, dtype, element count, reduce op, root, layouts (CallInfo) and a sequence
// number counted per group and rank — that the ranks compare before any data moves; a mismatch is
// a CollectiveMismatchError on every rank naming both sides, and a rank that waits longer than
// collective_timeout() raises CollectiveTimeoutError naming what each rank is in (the watchdog).
//
//   set_check_collectives(true);               // from now on, in this process
//   { CollectiveCheck on(true); ... }          // for a scope; the previous setting comes back
//   set_collective_timeout(0.5);               // the watchdog's limit, in seconds
//
// Default: on when NDEBUG is not defined, off otherwise; the test mains turn it on. Like the
// replica check it is one setting per process and every rank of a group must agree on it (the
// check is part of the collective): change it before ranks start, not while they run. The
// timeout's default is 10 s, or SHARDALG_COLLECTIVE_TIMEOUT (seconds) when that is set.
// ---------------------------------------------------------------------------------------------
namespace detail {
#ifdef NDEBUG
constexpr bool collective_check_default = false;
#else
constexpr bool collective_check_default = true;
#endif
/// −1: the build's default; 0: off; 1: on.
inline std::atomic<int>& collective_check_state() {
  static std::atomic<int> state{-1};
  return state;
}
/// The watchdog's limit in seconds; a negative value means "not set yet" (the environment's or 10).
inline std::atomic<double>& collective_timeout_state() {
  static std::atomic<double> seconds{-1.0};
  return seconds;
}
inline double collective_timeout_default() {
  static const double s = [] {
    if (const char* e = std::getenv("SHARDALG_COLLECTIVE_TIMEOUT")) {
      char* end = nullptr;
      const double v = std::strtod(e, &end);
      if (end != e && v > 0) return v;
    }
    return 10.0;
  }();
  return s;
}
}  // namespace detail

/// Whether collectives carry and compare fingerprints (and run under the watchdog).
inline bool check_collectives() {
  const int s = detail::collective_check_state().load(std::memory_order_relaxed);
  return s < 0 ? detail::collective_check_default : s != 0;
}

/// Turn checked collectives on or off for the whole process.
inline void set_check_collectives(bool on) {
  detail::collective_check_state().store(on ? 1 : 0, std::memory_order_relaxed);
}

/// RAII: checked collectives on (or off) while it lives; the previous setting after.
class CollectiveCheck {
 public:
  explicit CollectiveCheck(bool on) : saved_(detail::collective_check_state().exchange(on ? 1 : 0)) {}
  CollectiveCheck(const CollectiveCheck&) = delete;
  CollectiveCheck& operator=(const CollectiveCheck&) = delete;
  ~CollectiveCheck() { detail::collective_check_state().store(saved_); }

 private:
  int saved_;
};

/// The watchdog's limit: how long a rank may wait in a checked collective, in seconds.
inline double collective_timeout() {
  const double s = detail::collective_timeout_state().load(std::memory_order_relaxed);
  return s > 0 ? s : detail::collective_timeout_default();
}
/// Set the watchdog's limit (seconds > 0); 0 or less goes back to the default.
inline void set_collective_timeout(double seconds) {
  detail::collective_timeout_state().store(seconds, std::memory_order_relaxed);
}

}  // namespace shardalg
