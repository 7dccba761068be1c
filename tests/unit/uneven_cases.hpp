// tests/unit/uneven_cases.hpp — the laws on shapes that do not divide by P, run on one rank of a
// group (threads or MPI); each failure comes back as text.
//
//   blocks:    rank r's block of a split layout is the rows (columns) an independent count gives:
//              n items dealt one at a time to ranks 0, 1, …, P−1, 0, 1, … (so the first n mod P
//              ranks get one more), contiguous in rank order; a rank may hold none.
//   forward:   to_dense(redistribute<To>(x)) == X bit for bit, for every (From, To) of R, Row, C,
//              Partial (integer-valued operands: every sum is exact).
//   adjoint:   Σ_r ⟨z_r, y_r⟩ == Σ_r ⟨x_r, adjoint::redistribute<From>(y)_r⟩.
//   ledger:    one entry per communicating step, of the real whole-matrix element count.
//   matmul:    matmul<To>(A[La], B[Lb]) == A·B for every layout triple, with m, k, n not dividing.
#pragma once

#include <string>
#include <vector>

#include "testing.hpp"

namespace uneven_cases {

using namespace shardalg;
using testing::Mat;

/// Shapes with prime dimensions, dimensions below P (ranks with zero rows) and one that divides.
inline std::vector<std::pair<Index, Index>> shapes(int p) {
  return {{7, 5}, {2, 11}, {13, 3}, {1, 2}, {Index(p) + 1, Index(2 * p) - 1}, {Index(4 * p), 3}};
}

/// Rank r's block of n on p ranks, counted independently of base/blocks.hpp.
inline std::pair<Index, Index> dealt_block(Index n, int p, int r) {
  std::vector<Index> size(static_cast<std::size_t>(p), 0);
  for (Index i = 0; i < n; ++i) ++size[static_cast<std::size_t>(i % p)];
  Index offset = 0;
  for (int s = 0; s < r; ++s) offset += size[static_cast<std::size_t>(s)];
  return {offset, size[static_cast<std::size_t>(r)]};
}

template <class L>
using cot_layout = std::conditional_t<std::is_same_v<L, Replicated>, Partial,
                                      std::conditional_t<std::is_same_v<L, Partial>, Replicated, L>>;

inline const char* step_kind(LayoutKind from, LayoutKind to) {
  using K = LayoutKind;
  if (from == to || to == K::partial || from == K::replicated) return nullptr;  // free steps
  if (from == K::partial) return to == K::replicated ? "all_reduce" : "reduce_scatter";
  if (to == K::replicated) return "all_gather";
  return "all_to_all";
}

/// The laws above for T on this rank's handle `plain`. `sum_over_ranks` adds a double over the
/// group (the pairings are per rank).
template <class T, class Sum>
std::vector<std::string> run(const Group& plain, Sum sum_over_ranks) {
  std::vector<std::string> fails;
  const int p = plain.size(), me = plain.rank();
  auto fail = [&](const std::string& what, Index r, Index c) {
    fails.push_back(what + " at " + std::to_string(r) + "x" + std::to_string(c) + " on " + std::to_string(p) +
                    " ranks (rank " + std::to_string(me) + ")");
  };
  for (const auto& [r, c] : shapes(p)) {
    const Index rr = r, cc = c;
    // blocks
    const Mat<T> X0 = testing::random_int<T>(rr, cc, 3);
    const auto xr = shard<RowSharded>(X0, plain);
    const auto xc = shard<ColSharded>(X0, plain);
    const auto [ro, rn] = dealt_block(rr, p, me);
    const auto [co, cn] = dealt_block(cc, p, me);
    if (xr.local_rows() != rn || xr.row_offset() != ro || xr.local() != X0.middleRows(ro, rn))
      fail("the Row block is not the dealt one", rr, cc);
    if (xc.local_cols() != cn || xc.col_offset() != co || xc.local() != X0.middleCols(co, cn))
      fail("the C block is not the dealt one", rr, cc);
    // redistributions: forward, adjoint, ledger
    testing::for_each_layout_pair([&]<class From, class To>() {
      const std::string name = std::string("redistribute ") + std::string(From::notation) + " -> " +
                               std::string(To::notation);
      Ledger ledger;
      Group g = ledgered(plain, ledger);
      const auto x = testing::make_operand<From, T>(g, rr, cc, 5);
      const Mat<T> X = testing::dense_of<From, T>(rr, cc, 5, p);
      const auto z = redistribute<To>(x);
      const auto entries = ledger.entries();
      if (to_dense(z) != X) fail(name + ": value differs from the dense matrix", rr, cc);
      const char* kind = step_kind(From::kind, To::kind);
      if (kind == nullptr ? !entries.empty()
                          : entries.size() != 1 || to_string(entries[0].kind) != kind ||
                                entries[0].elements != static_cast<std::size_t>(rr * cc))
        fail(name + ": ledger is not one " + (kind ? kind : "nothing") + " of the whole matrix's elements", rr, cc);
      const auto y = testing::make_operand<cot_layout<To>, T>(plain, rr, cc, 6);
      const double lhs = sum_over_ranks(testing::local_pairing(z, y));
      const double rhs = sum_over_ranks(testing::local_pairing(x, adjoint::redistribute<From>(y)));
      if (lhs != rhs) fail(name + ": adjoint law " + std::to_string(lhs) + " != " + std::to_string(rhs), rr, cc);
    });
  }
  // matmul<To> on m, k, n that do not divide (and one of each below P).
  for (const auto& [m, k, n] : std::vector<std::tuple<Index, Index, Index>>{{5, 7, 3}, {11, 2, 13}, {1, 9, 2}}) {
    const Index mm = m, kk = k, nn = n;
    const Mat<T> A = testing::random_int<T>(mm, kk, 7), B = testing::random_int<T>(kk, nn, 8);
    const Mat<T> C = A * B;
    testing::for_each_layout_pair([&]<class La, class Lb>() {
      if constexpr (std::is_same_v<La, Partial> || std::is_same_v<Lb, Partial>) {
        return;  // a Partial operand is R after its all_reduce: covered by the redistributions
      } else {
        const auto a = shard<La>(A, plain);
        const auto b = shard<Lb>(B, plain);
        std::apply(
            [&]<class... To>(To...) {
              ((to_dense(matmul<To>(a, b)) == C
                    ? void()
                    : fail(std::string("matmul<") + std::string(To::notation) + ">(A[" + std::string(La::notation) +
                               "], B[" + std::string(Lb::notation) + "]) differs from A·B (k = " + std::to_string(kk) + ")",
                           mm, nn)),
               ...);
            },
            testing::AllLayouts{});
      }
    });
  }
  return fails;
}

}  // namespace uneven_cases
