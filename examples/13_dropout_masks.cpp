// 13 — Dropout masks keyed by global index are the same in every layout.
//
// keep(seed, i, j) is a function of the seed and the GLOBAL row and column only (a counter-based
// hash, as Philox is), so each rank generates exactly its own block of one global mask. A mask
// keyed by (seed + rank, local index) — what per-rank RNG streams amount to — is not.
//
//   13_dropout_masks [--tp 4] [--tokens 16] [--hidden 24] [--p 0.1] [--seed 1234]
#include <cmath>
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

static double keep(std::uint64_t seed, Index i, Index j, double p) {
  const std::uint64_t u = example::splitmix64(seed ^ example::splitmix64(static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ULL ^
                                                                         example::splitmix64(static_cast<std::uint64_t>(j))));
  return static_cast<double>(u >> 11) / 9007199254740992.0 >= p ? 1.0 : 0.0;
}

template <class L>
static Mat mask_block(const Sharded<double, L>& x, std::uint64_t seed, double p, bool by_rank) {
  Mat m(x.local_rows(), x.local_cols());
  for (Index i = 0; i < m.rows(); ++i)
    for (Index j = 0; j < m.cols(); ++j)
      m(i, j) = by_rank ? keep(seed + x.rank(), i, j, p) : keep(seed, x.row_offset() + i, x.col_offset() + j, p);
  return m;
}

int main(int argc, char** argv) {
  int P = 4;
  Index T = 16, h = 24;
  long long seed_flag = 1234;
  double p = 0.1;
  const example::Flags flags("13_dropout_masks", argc, argv,
                             {{"tp", &P}, {"tokens", &T}, {"hidden", &h}, {"p", &p}, {"seed", &seed_flag}});
  flags.require(T % P == 0 && h % P == 0, "--tokens and --hidden must be divisible by --tp " + std::to_string(P));
  flags.require(p > 0 && p < 1, "--p must lie strictly between 0 and 1");
  const std::uint64_t seed = static_cast<std::uint64_t>(seed_flag);
  const Mat X = example::matrix(T, h, 50);
  Mat dense_mask(T, h);
  for (Index i = 0; i < T; ++i)
    for (Index j = 0; j < h; ++j) dense_mask(i, j) = keep(seed, i, j, p);
  std::printf("dropout p=%.4g on a %lldx%lld activation, P=%d; mask keyed by (seed, global row, global col)\n\n", p,
              (long long)T, (long long)h, P);

  Mat row_mask, col_mask, row_rank, col_rank, row_y, col_y;
  run_ranks(P, [&](ThreadComm& comm) {
    Group g(comm);
    auto Xr = shard<RowSharded>(X, g);
    auto Xc = shard<ColSharded>(X, g);
    Sharded<double, RowSharded> Mr(mask_block(Xr, seed, p, false), T, h, g);
    Sharded<double, ColSharded> Mc(mask_block(Xc, seed, p, false), T, h, g);
    Sharded<double, RowSharded> Rr(mask_block(Xr, seed, p, true), T, h, g);
    Sharded<double, ColSharded> Rc(mask_block(Xc, seed, p, true), T, h, g);
    auto Yr = (1.0 / (1.0 - p)) * hadamard(Xr, Mr);  // dropout, Row layout
    auto Yc = (1.0 / (1.0 - p)) * hadamard(Xc, Mc);  // dropout, C layout
    auto a = to_dense(Mr), b = to_dense(Mc), c = to_dense(Rr), d = to_dense(Rc), e = to_dense(Yr), f = to_dense(Yc);
    if (comm.rank() == 0) row_mask = a, col_mask = b, row_rank = c, col_rank = d, row_y = e, col_y = f;
  });
  std::printf("first row of the mask, gathered from Row and from C shards:\n  Row: ");
  for (Index j = 0; j < h; ++j) std::printf("%.0f", row_mask(0, j));
  std::printf("\n  C:   ");
  for (Index j = 0; j < h; ++j) std::printf("%.0f", col_mask(0, j));
  std::printf("\n");
  example::check(row_mask == dense_mask && col_mask == dense_mask, "Row and C shards gather to the same dense mask, bit for bit");
  example::check(row_y == col_y, "the dropped-out activation is the same in both layouts");
  const double kept = dense_mask.sum();
  std::printf("kept %.0f of %lld = %.3f (expected 1 − p = %.4g; ±4σ = ±%.0f entries)\n", kept, (long long)(T * h),
              kept / (T * h), 1 - p, 4 * std::sqrt(T * h * p * (1 - p)));
  example::check(std::abs(kept - T * h * (1 - p)) < 4 * std::sqrt(T * h * p * (1 - p)), "the keep rate is 1 − p");

  const auto mismatches = [&](const Mat& m) { return static_cast<int>((m - dense_mask).cwiseAbs().sum()); };
  std::printf("\nkeyed by (seed + rank, local index) instead: Row layout differs from the TP=1 mask in %d entries,\n"
              "C layout in %d, and from each other in %d\n", mismatches(row_rank), mismatches(col_rank),
              static_cast<int>((row_rank - col_rank).cwiseAbs().sum()));
  example::check(mismatches(row_rank) > 0 && mismatches(col_rank) > 0 && row_rank != col_rank,
                 "rank-keyed masks depend on the layout (and on P)");
  return example::finish("13_dropout_masks");
}
