// shardalg/collective/all_to_allv.hpp — rows sent to other ranks in variable counts (the token
// dispatch of a mixture of experts), and its adjoint: the same exchange back with the counts swapped.
//
//   X[Row~] → Y[Row~]      Row~ ("ragged rows"): each rank holds a block of whole rows whose count
//                          differs by rank, cut into one run of rows per peer (`rows[s]`, in rank
//                          order). Rank r's run s goes to rank s; rank s receives the runs of every
//                          rank, rank 0's first. No element changes: it is a permutation of rows.
//   adjoint                the inverse permutation: the cotangent's runs go back where they came
//                          from, with the counts swapped (adjoint::all_to_allv(dy, x.rows)).
//
// Traffic per rank: the rows it sends to other ranks. The ledger records one all_to_all of
// Σ_s rows[s]·cols elements (what this rank sends, its own run included), Group::all_to_allv.
// The receiving counts must be known: the caller passes them (MoE: from its count exchange), and
// a rank whose counts disagree with its peers' is a CommError before any row moves (checked
// collectives) — never a read past a buffer.
#pragma once

#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// A block of whole rows on each rank of `group`, in runs: rows [o_s, o_s + rows[s]) belong to peer
/// s (o_s = Σ_{s' < s} rows[s']): destined for s before an exchange, arrived from s after one.
template <Element T, class B = CpuBackend>
struct RaggedRows {
  typename B::template matrix<T> local;  // [Σ rows, cols]
  std::vector<Index> rows;               // one count per rank of the group
  Group group;

  [[nodiscard]] Index total() const { return std::accumulate(rows.begin(), rows.end(), Index{0}); }
  /// The first row of peer s's run.
  [[nodiscard]] Index offset(int s) const {
    return std::accumulate(rows.begin(), rows.begin() + s, Index{0});
  }
};

namespace detail {
inline void check_ragged(const Group& g, const std::vector<Index>& rows, Index local_rows, const char* what) {
  if (static_cast<int>(rows.size()) != g.size())
    throw ShapeError(cat(what, ": ", rows.size(), " row counts for a group of ", g.size(), " ranks"));
  Index sum = 0;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    if (rows[s] < 0) throw ShapeError(cat(what, ": row count ", rows[s], " for rank ", s, " is negative"));
    sum += rows[s];
  }
  if (sum != local_rows)
    throw ShapeError(cat(what, ": the row counts add up to ", sum, " but the block has ", local_rows, " rows"));
}
}  // namespace detail

/// Row~ → Row~: run s of this rank's block goes to rank s; `recv_rows[s]` rows arrive from rank s
/// (rank s's rows[this rank]). One Group::all_to_allv, ledgered as an all_to_all.
template <Element T, class B>
RaggedRows<T, B> all_to_allv(const RaggedRows<T, B>& x, std::vector<Index> recv_rows) {
  detail::check_operand(x.group, "all_to_allv");
  detail::check_ragged(x.group, x.rows, x.local.rows(), "all_to_allv (send)");
  if (static_cast<int>(recv_rows.size()) != x.group.size())
    throw ShapeError(detail::cat("all_to_allv (receive): ", recv_rows.size(), " row counts for a group of ",
                                 x.group.size(), " ranks"));
  const Index cols = x.local.cols();
  const int p = x.group.size();
  std::vector<std::size_t> sc(static_cast<std::size_t>(p)), rc(static_cast<std::size_t>(p));
  Index recv_total = 0;
  for (int s = 0; s < p; ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (recv_rows[i] < 0)
      throw ShapeError(detail::cat("all_to_allv (receive): row count ", recv_rows[i], " for rank ", s, " is negative"));
    sc[i] = static_cast<std::size_t>(x.rows[i] * cols);
    rc[i] = static_cast<std::size_t>(recv_rows[i] * cols);
    recv_total += recv_rows[i];
  }
  auto e = explain_op(x.group, "all_to_allv", dtype_of<T>,
                      {Note::number(x.local.rows()), "x", Note::number(cols), "[Row~] → ", Note::number(recv_total), "x",
                       Note::number(cols), "[Row~]"});
  // Row-major blocks: a run of whole rows is contiguous, so the runs are the all_to_allv's blocks.
  auto out = B::template empty<T>(recv_total, cols);
  Group g = x.group;
  g.all_to_allv(x.local.data(), sc.data(), out.data(), rc.data(), dtype_of<T>, CallInfo{"Row~", "Row~"});
  return {std::move(out), std::move(recv_rows), std::move(g)};
}

namespace adjoint {
/// Backward of all_to_allv: the cotangent dY[Row~] (runs as the forward's output) goes back with the
/// counts swapped — `sent_rows` are the forward input's runs — so each row returns to its source.
template <Element T, class B>
RaggedRows<T, B> all_to_allv(const RaggedRows<T, B>& dy, std::vector<Index> sent_rows) {
  return shardalg::all_to_allv(dy, std::move(sent_rows));
}
}  // namespace adjoint

}  // namespace shardalg
