// shardalg/base/blocks.hpp — the split rule: which rows (or columns) of a dimension of n rank r
// of P holds in X[Row] (or X[C]).
//
//   balanced blocks: q = ⌊n/P⌋, e = n mod P
//   rank r holds     q + 1 rows if r < e, else q          (sizes differ by at most one)
//   starting at      r·q + min(r, e)                       (blocks contiguous, in rank order)
//
//   n = 10, P = 4:   3 3 2 2        n = 3, P = 5:   1 1 1 0 0        n = 8, P = 4:   2 2 2 2
//
// When P divides n every block is n/P, the equal blocks of the divisible case bit for bit. A rank
// holds zero rows only when n < P. This is numpy.array_split's rule and the one MPI programs use
// for block distributions; torch.chunk (DTensor's Shard) instead cuts ⌈n/P⌉-sized blocks and
// leaves the tail short or empty (n = 10, P = 4: 3 3 3 1; n = 5, P = 4: 2 2 1 0). Balanced blocks
// keep the largest block, which sets a collective's time and a rank's memory, at ⌈n/P⌉ and never
// leave a rank empty while another holds more than one extra row. A program exchanging shards
// with torch.chunk's rule converts with chunk_block (below) at its boundary
// (docs/design.md, "Uneven shards").
#pragma once

#include <algorithm>
#include <vector>

#include "shardalg/base/index.hpp"

namespace shardalg {

/// The rows [offset, offset + size) of a dimension that one rank holds.
struct BlockExtent {
  Index offset = 0;
  Index size = 0;
  friend constexpr bool operator==(const BlockExtent&, const BlockExtent&) = default;
};

/// Rank r's block of a dimension of n on p ranks, by the balanced rule above.
constexpr BlockExtent block_of(Index n, int p, int r) {
  const Index q = n / p, e = n % p;
  return {r * q + std::min<Index>(r, e), q + (r < e ? 1 : 0)};
}
constexpr Index block_size(Index n, int p, int r) { return block_of(n, p, r).size; }
constexpr Index block_offset(Index n, int p, int r) { return block_of(n, p, r).offset; }

/// Whether p divides n: every block is n/p (the path of equal-count collectives).
constexpr bool even_blocks(Index n, int p) { return n % p == 0; }

/// The sizes of all p blocks of n, in rank order.
inline std::vector<Index> block_sizes(Index n, int p) {
  std::vector<Index> s(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) s[static_cast<std::size_t>(r)] = block_size(n, p, r);
  return s;
}

/// torch.chunk's block of rank r: ⌈n/p⌉ rows each, the last ones short or empty.
constexpr BlockExtent chunk_block(Index n, int p, int r) {
  const Index c = (n + p - 1) / p;
  const Index begin = std::min<Index>(n, r * c);
  return {begin, std::min<Index>(n, begin + c) - begin};
}

}  // namespace shardalg
