// shardalg/cost/parallel_config.hpp — which tensor-parallel degrees a model admits, and the
// vocabulary padding that makes its embedding split evenly.
//
//   valid_tp_degrees(96)  → 1 2 3 4 6 8 12 16 24 32 48 96   (each rank owns whole heads)
//   check_tp_degree(32, 6) throws DivisibilityError "heads 32 is not divisible by tensor-parallel size 6"
//   padded_vocab_size(50257, 128, 8) → 51200                 (a multiple of 128 · 8 = 1024)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardalg/base/errors.hpp"

namespace shardalg::cost {

/// Every P that divides the head count: attention heads are independent, so each rank must own
/// a whole number of them.
inline std::vector<int> valid_tp_degrees(int heads) {
  std::vector<int> out;
  for (int p = 1; p <= heads; ++p)
    if (heads % p == 0) out.push_back(p);
  return out;
}

/// The exact text of the error for heads not divisible by the tensor-parallel size.
inline std::string heads_not_divisible_message(std::int64_t heads, int tp) {
  return detail::cat("heads ", heads, " is not divisible by tensor-parallel size ", tp);
}

/// Throws DivisibilityError (one line, naming the values) unless `tp` divides the heads, the
/// hidden size and (when given) the ffn hidden size.
inline void check_tp_degree(std::int64_t heads, int tp, std::int64_t hidden = 0, std::int64_t ffn_hidden = 0) {
  if (tp < 1) throw DivisibilityError(detail::cat("tensor-parallel size ", tp, " must be at least 1"));
  if (heads % tp != 0) throw DivisibilityError(heads_not_divisible_message(heads, tp));
  if (hidden != 0 && hidden % tp != 0)
    throw DivisibilityError(detail::cat("hidden ", hidden, " is not divisible by tensor-parallel size ", tp));
  if (ffn_hidden != 0 && ffn_hidden % tp != 0)
    throw DivisibilityError(detail::cat("ffn hidden ", ffn_hidden, " is not divisible by tensor-parallel size ", tp));
}

/// Megatron's padding: round the vocabulary up to a multiple of divisor · tp, so that every
/// rank's slice of the vocab-parallel embedding is a multiple of `divisor` (128 by default).
constexpr std::int64_t padded_vocab_size(std::int64_t vocab, std::int64_t divisor = 128, int tp = 1) {
  const std::int64_t m = divisor * tp;
  return (vocab + m - 1) / m * m;
}

/// Values an all-gather of the vocab-parallel logits moves: the whole b·s·v matrix.
constexpr double gathered_logits_values(std::int64_t batch, std::int64_t seq, std::int64_t vocab) {
  return static_cast<double>(batch) * static_cast<double>(seq) * static_cast<double>(vocab);
}
/// Values the fused vocab-parallel cross-entropy all-reduces: per token the max logit, the sum of
/// exponentials and the target logit, 3·b·s (the order is b·s: no vocabulary factor).
constexpr double fused_cross_entropy_values(std::int64_t batch, std::int64_t seq) {
  return 3.0 * static_cast<double>(batch) * static_cast<double>(seq);
}

}  // namespace shardalg::cost
