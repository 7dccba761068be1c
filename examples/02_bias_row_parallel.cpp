// 02 — The bias of a row-parallel layer: Y = X·W + b with Z = X[C]·W[Row] → Partial.
//
// Three right ways and one wrong one:
//   after the reduction     all_reduce(Z) + b              (shardalg's way: add_bias on R)
//   b/P before              Σ_r (Z_r + b/P) = Z + b
//   rank 0 only             (Z_0 + b) + Σ_{r>0} Z_r = Z + b
//   every rank adds b       Σ_r (Z_r + b) = Z + P·b        wrong: add_bias on Partial is [shardalg.E111]
//
//   02_bias_row_parallel [--tp 4] [--tokens 6] [--in 8] [--out 5]
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  int P = 4;
  Index T = 6, n_in = 8, n_out = 5;
  const example::Flags flags("02_bias_row_parallel", argc, argv, {{"tp", &P}, {"tokens", &T}, {"in", &n_in}, {"out", &n_out}});
  flags.require(P >= 2 && n_in % P == 0, "--in " + std::to_string(n_in) + " must be divisible by --tp " + std::to_string(P) + " (tp ≥ 2)");
  flags.require(n_out >= 2, "--out must be at least 2 (the output shows two columns)");
  const Mat X = example::matrix(T, n_in, 3), W = example::matrix(n_in, n_out, 4), b = example::matrix(1, n_out, 5);
  const Mat ref = (X * W).rowwise() + b.row(0);
  std::printf("Y = X·W + b, X %lldx%lld ColSharded, W %lldx%lld RowSharded, b 1x%lld, P = %d\n\n", (long long)T,
              (long long)n_in, (long long)n_in, (long long)n_out, (long long)n_out, P);

  ErrorReport after, scaled, rank0, wrong;
  Mat wrong_minus_ref;
  run_ranks(P, [&](ThreadComm& comm) {
    Group g(comm);
    auto Xc = shard<ColSharded>(X, g);
    auto Wr = shard<RowSharded>(W, g);
    auto br = shard<Replicated>(b, g);
    auto Z = matmul(Xc, Wr);  // C · Row → Partial
    const int r = comm.rank();
    // 1. after the reduction
    auto Y1 = add_bias(all_reduce(Z), br);
    // 2. b/P on every summand (done on the local blocks; the type would not allow add_bias here)
    Sharded<double, Partial> Z2(Mat(Z.local().rowwise() + (b.row(0) / P)), Z.rows(), Z.cols(), g);
    // 3. rank 0 only
    Sharded<double, Partial> Z3(r == 0 ? Mat(Z.local().rowwise() + b.row(0)) : Z.local(), Z.rows(), Z.cols(), g);
    // 4. every rank adds b (wrong)
    Sharded<double, Partial> Z4(Mat(Z.local().rowwise() + b.row(0)), Z.rows(), Z.cols(), g);
    auto e1 = compare(Y1, ref);
    auto e2 = compare(all_reduce(std::move(Z2)), ref);
    auto e3 = compare(all_reduce(std::move(Z3)), ref);
    auto Y4 = all_reduce(std::move(Z4));
    auto e4 = compare(Y4, ref);
    if (r == 0) after = e1, scaled = e2, rank0 = e3, wrong = e4, wrong_minus_ref = Y4.local() - ref;
  });

  std::printf("1. all_reduce(Z) then + b:        max error %.3g\n", after.max_abs);
  example::check(after.max_abs < 1e-12, "bias after the reduction is right");
  std::printf("2. + b/P on each rank, then sum:  max error %.3g\n", scaled.max_abs);
  example::check(scaled.max_abs < 1e-12, "b/P before the reduction is right (up to rounding)");
  std::printf("3. + b on rank 0 only, then sum:  max error %.3g\n", rank0.max_abs);
  example::check(rank0.max_abs < 1e-12, "rank 0 only is right");
  std::printf("4. + b on every rank, then sum:   max error %.3g  (wrong)\n", wrong.max_abs);
  // The wrong result is off by exactly (P−1)·b in every row.
  const Mat expected_excess = Mat::Ones(T, 1) * (b * (P - 1));
  const double excess_err = (wrong_minus_ref - expected_excess).cwiseAbs().maxCoeff();
  std::printf("   wrong − right = (P−1)·b in every row: first row %+.4f %+.4f …, (P−1)·b = %+.4f %+.4f …\n",
              wrong_minus_ref(0, 0), wrong_minus_ref(0, 1), (P - 1) * b(0, 0), (P - 1) * b(0, 1));
  example::check(excess_err < 1e-12, "adding b on every rank adds it P times: the error is exactly (P-1)·b");
  std::printf("\nshardalg: add_bias(Z[Partial], b) does not compile — [shardalg.E111] \"every rank would add\n"
              "the bias, so the sum holds it P times\"; all_reduce first, then add the bias once.\n");
  return example::finish("02_bias_row_parallel");
}
