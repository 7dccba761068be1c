// shardalg/nn/layers/cp_tokens.hpp — which tokens a context-parallel rank holds.
//
// Context parallelism splits the sequence of every activation over the cp ranks: X[cp:Row] on a
// token order chosen for causal attention. Cut each sequence of s positions into 2·cp chunks of
// c = s / (2·cp); rank r holds chunks r and 2·cp − 1 − r of every sequence:
//
//   cp = 2, s = 8 (c = 2)     chunk   0    1    2    3        positions 0–1 | 2–3 | 4–5 | 6–7
//                             rank    0    1    1    0
//
// Under the causal mask query chunk q attends to key chunks ≤ q, so rank r's two chunks see
// (r + 1) + (2·cp − r) = 2·cp + 1 chunk blocks, two of them diagonal: the same work on every rank
// (a plain split, rank r holding chunk r of cp, would give rank r r + 1 blocks: cp − 1 ranks idle
// while the last works). Outside attention every op is token-wise, so the order is invisible there;
// the loss is a sum over tokens, the same in any order.
//
// Local rows, for each sequence b of the batch: chunk r's c rows, then chunk 2·cp − 1 − r's.
#pragma once

#include <vector>

#include "shardalg/base/errors.hpp"
#include "shardalg/base/index.hpp"

namespace shardalg::nn {

struct CpTokens {
  Index seq = 0;    // positions per sequence (whole)
  Index batch = 0;  // sequences
  int cp = 1;
  int rank = 0;

  /// "context parallelism: sequence length 10 is not divisible by 2·cp = 8 (…)".
  static void check(Index seq, int cp) {
    if (cp < 1) throw GroupSizeError(shardalg::detail::cat("context parallelism: cp ", cp, " must be at least 1"));
    if (seq % (2 * Index{cp}) != 0)
      throw DivisibilityError(shardalg::detail::cat("context parallelism: sequence length ", seq, " is not divisible by 2·cp = ", 2 * cp,
                                          " (two chunks per rank, for the causal balance)"));
  }
  [[nodiscard]] Index chunk() const { return seq / (2 * Index{cp}); }
  /// Rows this rank holds: two chunks of every sequence.
  [[nodiscard]] Index rows() const { return batch * 2 * chunk(); }
  /// The global chunk of rank `r`'s k-th local chunk (k = 0, 1).
  [[nodiscard]] Index chunk_of(int r, int k) const { return k == 0 ? r : 2 * Index{cp} - 1 - r; }
  /// Sequence and position of local row i of rank `r`.
  [[nodiscard]] Index sequence(Index i) const { return i / (2 * chunk()); }
  [[nodiscard]] Index position(Index i, int r) const {
    const Index c = chunk(), in_seq = i % (2 * c);
    return chunk_of(r, static_cast<int>(in_seq / c)) * c + in_seq % c;
  }
  [[nodiscard]] Index position(Index i) const { return position(i, rank); }
  /// The row of the whole batch (batch-major: sequence · seq + position) that local row i is.
  [[nodiscard]] Index global_row(Index i) const { return sequence(i) * seq + position(i); }
  /// This rank's rows of a batch-major [batch·seq, w] matrix.
  template <class M>
  [[nodiscard]] M take(const M& dense) const {
    M out(rows(), dense.cols());
    for (Index i = 0; i < rows(); ++i) out.row(i) = dense.row(global_row(i));
    return out;
  }
};

}  // namespace shardalg::nn
