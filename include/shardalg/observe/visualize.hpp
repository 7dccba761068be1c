// shardalg/observe/visualize.hpp — which rank holds which block of a tensor, in text (after
// PyTorch's visualize_sharding). No communication: the layout, the global shape and the group
// size determine it.
//
//   visualize(x) for x = 8x6[C] on 3 ranks:
//     8x6 ColSharded on 3 ranks (each holds 8x2)
//       rank 0: rows 0..7, cols 0..1
//       rank 1: rows 0..7, cols 2..3
//       rank 2: rows 0..7, cols 4..5
#pragma once

#include <sstream>
#include <string>

#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// The block map of a `rows × cols` matrix in layout `k` on `p` ranks.
inline std::string visualize(LayoutKind k, Index rows, Index cols, int p) {
  std::ostringstream os;
  os << rows << "x" << cols << " " << name(k) << " on " << p << (p == 1 ? " rank" : " ranks");
  auto range = [](Index a, Index n) { return n == 0 ? std::string("none") : std::to_string(a) + ".." + std::to_string(a + n - 1); };
  switch (k) {
    case LayoutKind::replicated: os << ": every rank holds the whole " << rows << "x" << cols << "\n"; break;
    case LayoutKind::invariant:
      os << ": every rank holds the whole " << rows << "x" << cols << " and computes its whole gradient\n";
      break;
    case LayoutKind::partial:
      os << ": every rank holds a " << rows << "x" << cols << " summand; the value is their sum\n";
      break;
    case LayoutKind::row:
    case LayoutKind::col:
      if (even_split(k, rows, cols, p)) {
        const auto [lr, lc] = local_shape(k, rows, cols, p, 0);
        os << " (each holds " << lr << "x" << lc << ")\n";
      } else {  // balanced blocks: the first n mod p ranks hold one more
        const auto [lr, lc] = local_shape(k, rows, cols, p, 0);
        const auto [sr, sc] = local_shape(k, rows, cols, p, p - 1);
        os << " (uneven: " << lr << "x" << lc << " down to " << sr << "x" << sc << ")\n";
      }
      for (int r = 0; r < p; ++r) {
        const BlockExtent b = block_of(k == LayoutKind::row ? rows : cols, p, r);
        os << "  rank " << r << ": rows " << (k == LayoutKind::row ? range(b.offset, b.size) : range(0, rows))
           << ", cols " << (k == LayoutKind::col ? range(b.offset, b.size) : range(0, cols)) << "\n";
      }
      break;
  }
  return os.str();
}

template <class T, class L, class B>
std::string visualize(const Sharded<T, L, B>& x) {
  return visualize(L::kind, x.rows(), x.cols(), x.size());
}

}  // namespace shardalg
