// shardalg/cost/alpha_beta.hpp — the α-β model of ring collectives.
//
// A message of n bytes between two ranks costs α + n/β: a latency α (seconds) and a bandwidth
// β (bytes per second). A ring collective on P ranks runs in steps; in each step every rank
// sends one block to its neighbour and receives one. With V the bytes of the dense buffer the
// collective is about (the summed matrix, the gathered whole):
//
//   collective       steps      bytes sent per rank    layouts
//   all_reduce       2(P−1)     2(P−1)/P · V           Partial → R   (a reduce-scatter + an all-gather)
//   reduce_scatter   P−1        (P−1)/P · V            Partial → Row or C
//   all_gather       P−1        (P−1)/P · V            Row or C → R
//   all_to_all       P−1        (P−1)/P² · V           Row ↔ C       (keep 1/P² of V, send the rest of your 1/P)
//
// time = steps · α + bytes_per_rank / β. With P = 1 every collective is free.
#pragma once

#include "shardalg/comm/communicator.hpp"

namespace shardalg::cost {

/// Link parameters: latency per message (seconds) and bandwidth (bytes per second).
struct AlphaBeta {
  double alpha_seconds = 0;
  double beta_bytes_per_second = 1;
};

// --- bytes sent per rank -----------------------------------------------------------------

constexpr double all_reduce_bytes_per_rank(double dense_bytes, int p) {
  return p <= 1 ? 0.0 : 2.0 * (p - 1) / p * dense_bytes;
}
constexpr double reduce_scatter_bytes_per_rank(double dense_bytes, int p) {
  return p <= 1 ? 0.0 : static_cast<double>(p - 1) / p * dense_bytes;
}
constexpr double all_gather_bytes_per_rank(double dense_bytes, int p) {
  return p <= 1 ? 0.0 : static_cast<double>(p - 1) / p * dense_bytes;
}
constexpr double all_to_all_bytes_per_rank(double dense_bytes, int p) {
  return p <= 1 ? 0.0 : static_cast<double>(p - 1) / (static_cast<double>(p) * p) * dense_bytes;
}

// --- ring steps (messages in sequence) -------------------------------------------------

constexpr int all_reduce_steps(int p) { return p <= 1 ? 0 : 2 * (p - 1); }
constexpr int reduce_scatter_steps(int p) { return p <= 1 ? 0 : p - 1; }
constexpr int all_gather_steps(int p) { return p <= 1 ? 0 : p - 1; }
constexpr int all_to_all_steps(int p) { return p <= 1 ? 0 : p - 1; }

// --- time ----------------------------------------------------------------------------------

constexpr double all_reduce_seconds(const AlphaBeta& link, double dense_bytes, int p) {
  return all_reduce_steps(p) * link.alpha_seconds + all_reduce_bytes_per_rank(dense_bytes, p) / link.beta_bytes_per_second;
}
constexpr double reduce_scatter_seconds(const AlphaBeta& link, double dense_bytes, int p) {
  return reduce_scatter_steps(p) * link.alpha_seconds +
         reduce_scatter_bytes_per_rank(dense_bytes, p) / link.beta_bytes_per_second;
}
constexpr double all_gather_seconds(const AlphaBeta& link, double dense_bytes, int p) {
  return all_gather_steps(p) * link.alpha_seconds + all_gather_bytes_per_rank(dense_bytes, p) / link.beta_bytes_per_second;
}
constexpr double all_to_all_seconds(const AlphaBeta& link, double dense_bytes, int p) {
  return all_to_all_steps(p) * link.alpha_seconds + all_to_all_bytes_per_rank(dense_bytes, p) / link.beta_bytes_per_second;
}

/// Bytes per rank of a collective named by the ledger's kind (0 for point-to-point kinds,
/// which are not ring collectives; broadcast is modelled as a scatter + all-gather: 2(P−1)/P·V).
constexpr double collective_bytes_per_rank(CollectiveKind kind, double dense_bytes, int p) {
  switch (kind) {
    case CollectiveKind::all_reduce: return all_reduce_bytes_per_rank(dense_bytes, p);
    case CollectiveKind::reduce_scatter: return reduce_scatter_bytes_per_rank(dense_bytes, p);
    case CollectiveKind::all_gather: return all_gather_bytes_per_rank(dense_bytes, p);
    case CollectiveKind::all_to_all: return all_to_all_bytes_per_rank(dense_bytes, p);
    case CollectiveKind::broadcast: return all_reduce_bytes_per_rank(dense_bytes, p);
    case CollectiveKind::send:
    case CollectiveKind::recv:
    case CollectiveKind::halo: return dense_bytes;
  }
  return 0;
}

/// Predicted time of a collective named by the ledger's kind.
constexpr double collective_seconds(const AlphaBeta& link, CollectiveKind kind, double dense_bytes, int p) {
  switch (kind) {
    case CollectiveKind::all_reduce: return all_reduce_seconds(link, dense_bytes, p);
    case CollectiveKind::reduce_scatter: return reduce_scatter_seconds(link, dense_bytes, p);
    case CollectiveKind::all_gather: return all_gather_seconds(link, dense_bytes, p);
    case CollectiveKind::all_to_all: return all_to_all_seconds(link, dense_bytes, p);
    case CollectiveKind::broadcast: return all_reduce_seconds(link, dense_bytes, p);
    case CollectiveKind::send:
    case CollectiveKind::recv:
    case CollectiveKind::halo: return link.alpha_seconds + dense_bytes / link.beta_bytes_per_second;
  }
  return 0;
}

}  // namespace shardalg::cost
