// 01 — Linearity: a column split commutes with GeLU, a row split does not.
//
//   column split   X[R] · A[C] → Y[C]        GeLU(Y[C]) is GeLU of whole entries: local, exact
//   row split      X[C] · A[Row] → Z[Partial] Z = Σ_r X_r·A_r, and GeLU(Σ z_r) ≠ Σ GeLU(z_r)
//
// In shardalg the second mistake does not compile: `map(Z_partial, gelu)` is [shardalg.E110].
// Here we make it by hand on the local summands, to see the number it would produce.
//
//   01_linearity [--tp 4] [--tokens 4] [--hidden 8]
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  int P = 4;
  Index T = 4, h = 8;
  const example::Flags flags("01_linearity", argc, argv, {{"tp", &P}, {"tokens", &T}, {"hidden", &h}});
  flags.require(P >= 2 && h % P == 0, "--hidden " + std::to_string(h) + " must be divisible by --tp " + std::to_string(P) + " (tp ≥ 2)");
  const Mat X = example::matrix(T, h, 1), A = example::matrix(h, h, 2);
  const auto gelu = [](double v) { return example::gelu(v); };
  const Mat XA = X * A;
  const Mat ref = XA.unaryExpr(gelu);
  std::printf("Y = GeLU(X·A), X %lldx%lld, A %lldx%lld, on P = %d ThreadComm ranks\n\n", (long long)T, (long long)h,
              (long long)h, (long long)h, P);

  ErrorReport col, linear, wrong, right;
  std::vector<double> z00(P);
  run_ranks(P, [&](ThreadComm& comm) {
    Group g(comm);
    // Column split: every rank holds whole output columns.
    auto Xr = shard<Replicated>(X, g);
    auto Ac = shard<ColSharded>(A, g);
    auto Yc = matmul(Xr, Ac);     // R · C → C, no communication
    auto Gc = map(Yc, gelu);      // GeLU of complete entries
    auto e_col = compare(Gc, ref);
    // Row split: every rank holds a summand of every entry.
    auto Xc = shard<ColSharded>(X, g);
    auto Ar = shard<RowSharded>(A, g);
    auto Zp = matmul(Xc, Ar);     // C · Row → Partial, no communication
    auto e_lin = compare(Zp, XA); // matmul is linear: the summands add up to X·A
    z00[comm.rank()] = Zp.local()(0, 0);
    // GeLU on each summand, then the sum (what map(Zp, gelu) would do; E110 forbids it):
    Sharded<double, Partial> Wp(Zp.local().unaryExpr(gelu), Zp.rows(), Zp.cols(), g);
    auto e_wrong = compare(Wp, ref);
    // The right order: all_reduce, then GeLU.
    auto Gr = map(all_reduce(std::move(Zp)), gelu);
    auto e_right = compare(Gr, ref);
    if (comm.rank() == 0) {
      std::printf("column split: X%s · A%s → Y%s; GeLU(Y) local\n", "[R]", "[C]", "[C]");
      std::printf("row split:    X[C] · A[Row] → Z[Partial]; all_reduce → Z[R]; GeLU(Z) local\n\n");
      col = e_col, linear = e_lin, wrong = e_wrong, right = e_right;
    }
  });

  std::printf("column split, GeLU on the shards:          max error %.3g\n", col.max_abs);
  example::check(col.max_abs < 1e-12, "a column split commutes with GeLU");
  std::printf("row split, Σ_r X_r·A_r (before any GeLU):  max error %.3g\n", linear.max_abs);
  example::check(linear.max_abs < 1e-12, "matmul is linear: the partial products sum to X·A");
  double sum = 0, sum_gelu = 0;
  std::printf("\nentry (0,0): summands z_r =");
  for (double z : z00) std::printf(" %+.4f", z), sum += z, sum_gelu += example::gelu(z);
  std::printf("\n  GeLU(Σ z_r) = GeLU(%+.4f) = %+.4f   but   Σ GeLU(z_r) = %+.4f\n", sum, example::gelu(sum), sum_gelu);
  example::check(std::abs(example::gelu(sum) - sum_gelu) > 1e-3, "GeLU does not distribute over the sum");
  std::printf("\nrow split, GeLU before the all-reduce:     max error %.3g  (wrong)\n", wrong.max_abs);
  example::check(wrong.max_abs > 0.05, "GeLU of the summands is materially wrong");
  std::printf("row split, all-reduce then GeLU:           max error %.3g\n", right.max_abs);
  example::check(right.max_abs < 1e-12, "reducing first gives the right answer (one all-reduce)");
  std::printf("\nSo Megatron splits the first matmul by columns: its GeLU costs nothing.\n");
  return example::finish("01_linearity");
}
