// 12 — Sequence parallelism: the same bytes on the wire, the activations between blocks divided by P.
//
//   without SP  X[R] · W1[C] → GeLU → · W2[Row] → Partial →all_reduce→ Z[R]        (holds T·h)
//   with SP     X[Row] →all_gather→ X[R] · W1[C] → GeLU → · W2[Row] → Partial →reduce_scatter→ Z[Row]  (holds T·h/P)
//
//   12_sequence_parallel [--tp 4] [--tokens 16] [--hidden 8]                              the run (ffn 4h)
//                        [--model-hidden 4096] [--seq 2048] [--batch 4] [--heads 32] [--model-tp 8]  the formula
#include <cstdio>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace cost = shardalg::cost;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  int P = 4, mt = 8;
  Index T = 16, h = 8;
  long long md = 4096, ms = 2048, mb = 4, ma = 32;
  const example::Flags flags("12_sequence_parallel", argc, argv,
                             {{"tp", &P}, {"tokens", &T}, {"hidden", &h}, {"model-hidden", &md}, {"seq", &ms},
                              {"batch", &mb}, {"heads", &ma}, {"model-tp", &mt}});
  const Index f = 4 * h;
  flags.require(T % P == 0 && f % P == 0, "--tokens " + std::to_string(T) + " and 4·hidden must be divisible by --tp " +
                                              std::to_string(P));
  flags.require(mt >= 2, "--model-tp must be at least 2");
  const Mat X = example::matrix(T, h, 40), W1 = example::matrix(h, f, 41), W2 = example::matrix(f, h, 42);
  const auto gelu = [](double v) { return example::gelu(v); };
  const Mat Z = (X * W1).unaryExpr(gelu) * W2;
  std::printf("MLP block, T=%lld tokens, h=%lld, P=%d, double\n\n", (long long)T, (long long)h, P);

  ErrorReport e_nosp, e_sp;
  std::size_t held_nosp = 0, held_sp = 0;
  std::size_t ar = 0, ag = 0, rs = 0, ar_el = 0, ag_el = 0, rs_el = 0;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    auto W1c = shard<ColSharded>(W1, g);
    auto W2r = shard<RowSharded>(W2, g);
    Sharded<double, Replicated> Zr;
    Sharded<double, RowSharded> Zrow;
    std::size_t h1 = 0, h2 = 0;
    {
      auto s = ledger.scope("no_sp");
      auto Xr = shard<Replicated>(X, g);
      h1 = static_cast<std::size_t>(Xr.local().size()) * sizeof(double);
      Zr = all_reduce(matmul(map(matmul(Xr, W1c), gelu), W2r));
    }
    {
      auto s = ledger.scope("sp");
      auto Xrow = shard<RowSharded>(X, g);
      h2 = static_cast<std::size_t>(Xrow.local().size()) * sizeof(double);
      Zrow = reduce_scatter<RowSharded>(matmul(map(matmul(all_gather(Xrow), W1c), gelu), W2r));
    }
    auto e1 = compare(Zr, Z);
    auto e2 = compare(Zrow, Z);
    if (comm.rank() == 0) {
      e_nosp = e1, e_sp = e2, held_nosp = h1, held_sp = h2;
      ar = ledger.count(CollectiveKind::all_reduce, "no_sp");
      ag = ledger.count(CollectiveKind::all_gather, "sp");
      rs = ledger.count(CollectiveKind::reduce_scatter, "sp");
      ar_el = ledger.select("no_sp").at(0).elements;
      for (const auto& e : ledger.select("sp")) (e.kind == CollectiveKind::all_gather ? ag_el : rs_el) = e.elements;
    }
  });
  std::printf("without SP: Z[R]   max error %.3g; residual X held per rank %zu B (T·h·8)\n", e_nosp.max_abs, held_nosp);
  std::printf("with SP:    Z[Row] max error %.3g; residual X held per rank %zu B (T·h·8 / P)\n", e_sp.max_abs, held_sp);
  example::check(e_nosp.max_abs < 1e-12 && e_sp.max_abs < 1e-12, "both match the dense block");
  example::check(held_nosp == std::size_t(T * h * 8) && held_sp == std::size_t(T * h * 8 / P), "SP holds 1/P of the residual activation");
  std::printf("ledger: without SP %zu all_reduce of %zu values; with SP %zu all_gather + %zu reduce_scatter of %zu and %zu\n",
              ar, ar_el, ag, rs, ag_el, rs_el);
  example::check(ar == 1 && ag == 1 && rs == 1 && ar_el == std::size_t(T * h) && ag_el == std::size_t(T * h) && rs_el == std::size_t(T * h),
                 "one all-reduce becomes one all-gather + one reduce-scatter of the same T·h");
  const double V = static_cast<double>(T * h * 8);
  const double ring = 2.0 * (P - 1) / P * V;  // reduce-scatter (P−1)/P·V + all-gather (P−1)/P·V
  std::printf("ring bytes per rank: all-reduce 2(P−1)/P·V = %.0f; all-gather + reduce-scatter 2·(P−1)/P·V = %.0f\n",
              cost::all_reduce_bytes_per_rank(V, P), cost::all_gather_bytes_per_rank(V, P) + cost::reduce_scatter_bytes_per_rank(V, P));
  example::check(example::close(cost::all_reduce_bytes_per_rank(V, P), ring, 1e-12) &&
                     example::close(cost::all_gather_bytes_per_rank(V, P) + cost::reduce_scatter_bytes_per_rank(V, P), ring, 1e-12),
                 "the same " + example::grouped(std::llround(ring)) + " bytes per rank either way");

  const cost::TransformerShape x{.batch = mb, .seq = ms, .hidden = md, .heads = ma};
  const double sbh = double(ms) * double(mb) * double(md), attn = 5.0 * double(ma) * double(ms) / double(md);
  std::printf("\nActivations saved per layer (Korthikanti et al. 2022; 16-bit, 1-byte dropout masks),\n"
              "d=%lld, s=%lld, b=%lld, a=%lld (s·b·h = %s; 5·a·s/h = %.4g):\n", md, ms, mb, ma,
              example::grouped((long long)sbh).c_str(), attn);
  const double a1 = cost::activation_bytes_per_layer(x, 1, false), a8 = cost::activation_bytes_per_layer(x, mt, false);
  const double a8sp = cost::activation_bytes_per_layer(x, mt, true);
  // The paper's three rows written out: everything replicated; attention and MLP internals split
  // (LayerNorm, dropout and residual inputs, 10·sbh, replicated); everything split.
  const double e1 = sbh * (34 + attn), e8 = sbh * (10 + 24.0 / mt + attn / mt), e8sp = sbh * (34 + attn) / mt;
  std::printf("  TP=1        s·b·h·(34 + %.4g)            = %6.0f MiB\n", attn, a1 / cost::MiB);
  std::printf("  TP=%d        s·b·h·(10 + 24/%d + %.4g/%d)   = %6.0f MiB  (LayerNorm, dropout and residual inputs replicated)\n",
              mt, mt, attn, mt, a8 / cost::MiB);
  std::printf("  TP=%d + SP   s·b·h·(34 + %.4g)/%d          = %6.0f MiB  = TP=1 / %d\n", mt, attn, mt, a8sp / cost::MiB, mt);
  example::check(example::close(a1, e1, 1e-12) && example::close(a8, e8, 1e-12) && example::close(a8sp, e8sp, 1e-12),
                 example::fmt("%.0f MiB, %.0f MiB, %.0f MiB (= %.0f / %d)", e1 / 1048576, e8 / 1048576, e8sp / 1048576,
                              e1 / 1048576, mt));
  return example::finish("12_sequence_parallel");
}
