// 11 — Vocabulary padding (50,257 → 51,200) and the fused vocab-parallel cross-entropy, which
// moves O(b·s) values instead of the b·s·v logits.
//
//   11_vocab_padding [--vocab 50257] [--divisor 128]   the padding (vocabulary v at TP 8 below)
//                    [--batch 8] [--seq 1024]          the loss's value counts
//                    [--tp 4] [--tokens 8] [--run-vocab 128]  the fused loss, run
#include <cmath>
#include <cstdio>
#include <vector>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace cost = shardalg::cost;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  long long vocab = 50257, divisor = 128, b = 8, s = 1024;
  int P = 4;
  Index T = 8, V = 128;
  const example::Flags flags("11_vocab_padding", argc, argv,
                             {{"vocab", &vocab}, {"divisor", &divisor}, {"batch", &b}, {"seq", &s}, {"tp", &P},
                              {"tokens", &T}, {"run-vocab", &V}});
  flags.require(V % 8 == 0 && V % P == 0, "--run-vocab " + std::to_string(V) + " must be a multiple of 8 and of --tp");
  const bool defaults = vocab == 50257 && divisor == 128;
  std::printf("Padding %s%s tokens to a multiple of %lld · TP (Megatron's make-vocab-size-divisible-by = %lld):\n",
              defaults ? "GPT-2's " : "", example::grouped(vocab).c_str(), divisor, divisor);
  for (int tp : {1, 2, 4, 8}) {
    const long long v = cost::padded_vocab_size(vocab, divisor, tp);
    const long long m = divisor * tp, expected = (vocab + m - 1) / m * m;  // the next multiple of divisor · TP
    std::printf("  TP=%d: multiple of %4lld → %lld (+%lld), %lld rows per rank = %lld · %lld\n", tp, m, v, v - vocab,
                v / tp, v / tp / divisor, divisor);
    example::check(v == expected, "padded vocabulary");
  }
  if (defaults) std::printf("  51,200 = 50 · 1024: at TP=8 each rank holds 6,400 = 50 · 128 rows (seed 002's figure).\n");

  const long long v = cost::padded_vocab_size(vocab, divisor, 8);
  std::printf("\nLoss over vocab-parallel logits, b=%lld, s=%lld, v=%lld:\n", b, s, v);
  std::printf("  all-gather the logits: b·s·v = %.4g values\n", cost::gathered_logits_values(b, s, v));
  std::printf("  fused: all-reduce the max (b·s) and the sum of exponentials and target logit (2·b·s) = %.4g values\n",
              cost::fused_cross_entropy_values(b, s));
  std::printf("  saving v/3 = %.0f×. Seed 002 says \"b·s numbers, a reduction by the full vocabulary factor v\":\n"
              "  the order is right, the constant is 3 (three statistics per token, not one loss).\n",
              cost::gathered_logits_values(b, s, v) / cost::fused_cross_entropy_values(b, s));
  example::check(cost::gathered_logits_values(b, s, v) == double(b * s * v) && cost::fused_cross_entropy_values(b, s) == double(3 * b * s),
                 example::grouped(b * s * v) + " values gathered vs " + example::grouped(3 * b * s) + " reduced");

  // The fused loss, run: ALGEBRA.md's oracle. Vocabulary V = V/8 copies of logits 0..7, so the
  // loss of target t is log(V/8 · Σ_{k<8} e^k) − (t mod 8) (10.2309 − (t mod 8) at V = 128).
  Mat logits(T, V);
  for (Index r = 0; r < T; ++r)
    for (Index k = 0; k < V; ++k) logits(r, k) = static_cast<double>(k % 8);
  std::vector<Index> target(T);
  for (Index r = 0; r < T; ++r) target[r] = (37 * r + 5) % V;
  const double copies = static_cast<double>(V / 8);
  const double lse = std::log(copies * (std::exp(8.0) - 1.0) / (std::exp(1.0) - 1.0));  // geometric series
  double direct = 0;  // the same sum term by term
  for (int k = 0; k < 8; ++k) direct += std::exp(static_cast<double>(k));
  direct = std::log(copies * direct);
  std::vector<double> loss(T);
  std::size_t reduced = 0, gathered = 0, n_collectives = 0;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    auto L = shard<ColSharded>(logits, g);  // vocab-parallel: rank r holds 32 tokens' logits
    const Index lo = L.col_offset(), n = L.local_cols();
    std::vector<double> mx(T), sums(2 * T, 0.0);
    {
      auto sc = ledger.scope("fused");
      for (Index r = 0; r < T; ++r) mx[r] = L.local().row(r).maxCoeff();
      g.all_reduce(mx.data(), T, ReduceOp::max, CallInfo{"Partial", "R"});
      for (Index r = 0; r < T; ++r) {
        sums[r] = (L.local().row(r).array() - mx[r]).exp().sum();
        if (target[r] >= lo && target[r] < lo + n) sums[T + r] = L.local()(r, target[r] - lo);
      }
      g.all_reduce(sums.data(), 2 * T, ReduceOp::sum, CallInfo{"Partial", "R"});
    }
    {
      auto sc = ledger.scope("gather");
      auto full = all_gather(L);  // the alternative: every rank gets all T·V logits
      (void)full;
    }
    if (comm.rank() == 0) {
      for (Index r = 0; r < T; ++r) loss[r] = std::log(sums[r]) + mx[r] - sums[T + r];
      for (const auto& e : ledger.select("fused")) reduced += e.elements;
      for (const auto& e : ledger.select("gather")) gathered += e.elements;
      n_collectives = ledger.count("fused");
    }
  });
  std::printf("\nfused loss on P=%d, vocabulary %lld = %lld × (0..7), T=%lld tokens:\n", P, (long long)V, (long long)(V / 8),
              (long long)T);
  double worst = 0;
  for (Index r = 0; r < T; ++r) {
    const double oracle = lse - static_cast<double>(target[r] % 8);
    std::printf("  token %lld target %3lld: loss %.6f, oracle %.4f − %lld = %.6f\n", (long long)r,
                (long long)target[r], loss[r], lse, (long long)(target[r] % 8), oracle);
    worst = std::max(worst, std::abs(loss[r] - oracle));
  }
  example::check(std::abs(lse - direct) < 1e-12 && (V != 128 || std::abs(lse - 10.2309) < 5e-5),
                 example::fmt("log(%lld · Σ e^k) = %.4f", (long long)(V / 8), direct));
  example::check(worst < 1e-12, "the fused loss equals the oracle for every token");
  std::printf("ledger: fused %zu all-reduces, %zu values (3·T); all-gather of the logits %zu values (T·v)\n",
              n_collectives, reduced, gathered);
  example::check(n_collectives == 2 && reduced == std::size_t(3 * T) && gathered == std::size_t(T * V), "3·T values instead of T·v");
  return example::finish("11_vocab_padding");
}
