// 04 — Attention heads: each rank owns whole heads, so the per-head softmax is local.
//
//   Q, K, V = X[R] · Wq/Wk/Wv[C]     columns grouped by head: rank r holds heads r·a/P … (r+1)·a/P − 1
//   S = stack over heads of Q_j·K_jᵀ/√d   a·T rows; rank r's heads are its row block → S[Row]
//   softmax_rows(S[Row])             row-wise on RowSharded: local (on C or Partial it would not compile)
//   O[C] = per head softmax(S_j)·V_j; O[C] · Wo[Row] → Partial → all_reduce → R: the block's one g
//
//   04_attention_heads [--tp 2] [--tokens 6] [--hidden 8] [--heads 4]
#include <cmath>
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  int P = 2;
  Index T = 6, h = 8, a = 4;
  const example::Flags flags("04_attention_heads", argc, argv, {{"tp", &P}, {"tokens", &T}, {"hidden", &h}, {"heads", &a}});
  flags.require(a % P == 0, "--heads " + std::to_string(a) + " must be divisible by --tp " + std::to_string(P));
  flags.require(h % a == 0 && h / a >= 2, "--hidden " + std::to_string(h) + " must be divisible by --heads " +
                                              std::to_string(a) + " with at least 2 dimensions per head");
  const Index dh = h / a;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  const Mat X = example::matrix(T, h, 20), Wq = example::matrix(h, h, 21), Wk = example::matrix(h, h, 22);
  const Mat Wv = example::matrix(h, h, 23), Wo = example::matrix(h, h, 24);

  // Dense multi-head attention, head by head.
  const Mat Q = X * Wq, K = X * Wk, V = X * Wv;
  Mat probs(a * T, T), O(T, h);
  for (Index j = 0; j < a; ++j) {
    Mat S = Q.middleCols(j * dh, dh) * K.middleCols(j * dh, dh).transpose() * scale;
    for (Index i = 0; i < T; ++i) {
      const double m = S.row(i).maxCoeff();
      S.row(i) = (S.row(i).array() - m).exp();
      S.row(i) /= S.row(i).sum();
    }
    probs.middleRows(j * T, T) = S;
    O.middleCols(j * dh, dh) = S * V.middleCols(j * dh, dh);
  }
  const Mat Y = O * Wo;

  std::printf("attention: T=%lld tokens, h=%lld, %lld heads of dimension %lld, P=%d → %lld heads per rank\n\n",
              (long long)T, (long long)h, (long long)a, (long long)dh, P, (long long)(a / P));
  ErrorReport eP, eO, eY;
  std::size_t collectives = 0;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    auto Xr = shard<Replicated>(X, g);
    auto Qc = matmul(Xr, shard<ColSharded>(Wq, g));  // R · C → C: this rank's heads' queries
    auto Kc = matmul(Xr, shard<ColSharded>(Wk, g));
    auto Vc = matmul(Xr, shard<ColSharded>(Wv, g));
    const Index local_heads = a / P;
    Mat S(local_heads * T, T);
    for (Index j = 0; j < local_heads; ++j)
      S.middleRows(j * T, T) = Qc.local().middleCols(j * dh, dh) * Kc.local().middleCols(j * dh, dh).transpose() * scale;
    Sharded<double, RowSharded> Sr(std::move(S), a * T, T, g);  // heads stacked by rows: [Row]
    auto Pr = softmax_rows(Sr);                                 // local: whole rows on every rank
    Mat Ol(T, local_heads * dh);
    for (Index j = 0; j < local_heads; ++j)
      Ol.middleCols(j * dh, dh) = Pr.local().middleRows(j * T, T) * Vc.local().middleCols(j * dh, dh);
    Sharded<double, ColSharded> Oc(std::move(Ol), T, h, g);
    auto Yr = all_reduce(matmul(Oc, shard<RowSharded>(Wo, g)));  // C · Row → Partial → R
    auto e1 = compare(Pr, probs);
    auto e2 = compare(Oc, O);
    auto e3 = compare(Yr, Y);
    if (comm.rank() == 0) eP = e1, eO = e2, eY = e3, collectives = ledger.count();
  });
  std::printf("per-head softmax, S[Row] (a·T x T, rows of rank r = its heads): max error %.3g\n", eP.max_abs);
  std::printf("heads' outputs O[C]:                                             max error %.3g\n", eO.max_abs);
  std::printf("Y[R] = all_reduce(O[C] · Wo[Row]):                               max error %.3g\n", eY.max_abs);
  example::check(eP.max_abs < 1e-12 && eO.max_abs < 1e-12 && eY.max_abs < 1e-12,
                 "sharded attention matches dense multi-head attention");
  example::check(collectives == 1, "one collective in the whole block: the all-reduce after Wo");

  // Why a head must not be split: a softmax over scores built from half a head's dimensions.
  const Mat S0 = Q.middleCols(0, dh) * K.middleCols(0, dh).transpose() * scale;
  const Mat S0half = Q.middleCols(0, 1) * K.middleCols(0, 1).transpose() * scale;
  auto softmax_row = [](Mat m) {
    for (Index i = 0; i < m.rows(); ++i) {
      m.row(i) = (m.row(i).array() - m.row(i).maxCoeff()).exp();
      m.row(i) /= m.row(i).sum();
    }
    return m;
  };
  const double diff = (softmax_row(S0) - softmax_row(S0half)).cwiseAbs().maxCoeff();
  std::printf("\nsplitting head 0's %lld dimensions across ranks: each holds a summand of its scores\n"
              "(S_0 = Σ_r Q_0r·K_0rᵀ, a Partial), and softmax of a summand differs by up to %.3f\n",
              (long long)dh, diff);
  example::check(diff > 0.01, "a head split across ranks needs its scores reduced before the softmax");
  std::printf("shardalg: softmax_rows on Partial is [shardalg.E115], on ColSharded [shardalg.E114].\n");
  return example::finish("04_attention_heads");
}
