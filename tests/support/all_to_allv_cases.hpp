// tests/support/all_to_allv_cases.hpp — the variable all-to-all and the non-blocking point to
// point (issue 16/17), written once against Group so that ThreadComm (tests/unit/test_p2p.cpp),
// MpiComm (tests/mpi/test_mpi_p2p.cpp) and the simulated CUDA world (tests/cuda/
// test_sim_protocol.cpp) run the same calls. Every rank builds the same count matrix from a seed;
// the expected blocks are written out from the matrix here, independently of the backends'
// displacement arithmetic.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "shardalg/shardalg.hpp"

namespace testing::a2av {

using namespace shardalg;

/// counts[s][r]: the elements rank s sends to rank r. About a quarter are 0 (a rank may send a
/// peer nothing, or receive nothing at all); the others 1 … 7.
inline std::vector<std::vector<std::size_t>> counts(int p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(0, 9);
  std::vector<std::vector<std::size_t>> c(static_cast<std::size_t>(p), std::vector<std::size_t>(static_cast<std::size_t>(p)));
  for (auto& row : c)
    for (auto& x : row) {
      const int v = d(rng);
      x = v < 3 ? 0 : static_cast<std::size_t>(v - 2);
    }
  return c;
}

/// The value of element k of the block rank s sends to rank r: exact in every dtype tested.
inline double value(int s, int r, std::size_t k) { return 10000.0 * s + 100.0 * r + static_cast<double>(k); }

/// Run one all_to_allv on `g` with counts `c` (c[s][r] from s to r) in element type T and count
/// the received elements that differ from what the matrix says (0 when right). The receive
/// buffer has one guard element after the last block, which must stay untouched.
template <class T>
std::size_t run_and_count_wrong(Group g, const std::vector<std::vector<std::size_t>>& c, const CallInfo& info = {}) {
  const int p = g.size(), me = g.rank();
  const auto P = static_cast<std::size_t>(p), mine = static_cast<std::size_t>(me);
  std::vector<std::size_t> sc(P), rc(P);
  std::size_t ns = 0, nr = 0;
  for (std::size_t s = 0; s < P; ++s) {
    sc[s] = c[mine][s];
    rc[s] = c[s][mine];
    ns += sc[s];
    nr += rc[s];
  }
  std::vector<T> send;
  for (int r = 0; r < p; ++r)
    for (std::size_t k = 0; k < sc[static_cast<std::size_t>(r)]; ++k) send.push_back(static_cast<T>(value(me, r, k)));
  const T guard = static_cast<T>(-12345);
  std::vector<T> recv(nr + 1, guard);
  g.all_to_allv(send.data(), sc.data(), recv.data(), rc.data(), info);
  std::size_t wrong = 0, at = 0;
  for (int s = 0; s < p; ++s)
    for (std::size_t k = 0; k < rc[static_cast<std::size_t>(s)]; ++k) wrong += recv[at++] != static_cast<T>(value(s, me, k));
  wrong += recv[nr] != guard;
  (void)ns;
  return wrong;
}

/// The mismatch case: on 2 or more ranks, rank 1 expects 3 elements from rank 0, which sends it 4
/// (every other pair agrees). Buffers are sized for what each rank asked for.
inline void mismatched_counts(Group& g) {
  const auto P = static_cast<std::size_t>(g.size());
  std::vector<std::size_t> sc(P, 2), rc(P, 2);
  if (g.rank() == 0) sc[1] = 4;
  if (g.rank() == 1) rc[0] = 3;
  std::size_t ns = 0, nr = 0;
  for (std::size_t s = 0; s < P; ++s) ns += sc[s], nr += rc[s];
  std::vector<double> send(ns, 1.0), recv(nr, 0.0);
  g.all_to_allv(send.data(), sc.data(), recv.data(), rc.data());
}
inline constexpr const char* mismatched_counts_text =
    "mismatched all_to_allv counts: rank 1 expects 3 elements from rank 0, which sends it 4";

/// A ring in both directions with the receives posted first (what would deadlock if irecv
/// blocked at the call): each rank receives from prev and next, then sends to next and prev.
/// Returns the number of wrong values.
inline int ring_exchange(Group g, std::size_t n) {
  const int p = g.size(), r = g.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  std::vector<double> from_prev(n, -1), from_next(n, -1), to_next(n), to_prev(n);
  for (std::size_t k = 0; k < n; ++k) {
    to_next[k] = 1000.0 * r + static_cast<double>(k);
    to_prev[k] = -1000.0 * r - static_cast<double>(k);
  }
  Request a = g.irecv(from_prev.data(), n, DType::f64, prev, CallInfo{"R", "R"});
  Request b = g.irecv(from_next.data(), n, DType::f64, next, CallInfo{"R", "R"});
  Request c = g.isend(to_next.data(), n, DType::f64, next, CallInfo{"R", "R"});
  Request d = g.isend(to_prev.data(), n, DType::f64, prev, CallInfo{"R", "R"});
  a.wait();
  b.wait();
  c.wait();
  d.wait();
  int wrong = 0;
  for (std::size_t k = 0; k < n; ++k) {
    wrong += from_prev[k] != 1000.0 * prev + static_cast<double>(k);
    wrong += from_next[k] != -1000.0 * next - static_cast<double>(k);
  }
  return wrong;
}

}  // namespace testing::a2av
