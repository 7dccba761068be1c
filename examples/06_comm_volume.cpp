// 06 — Communication volume of one transformer layer: d=4096, s=2048, b=4, TP=8, fp16.
//
//   06_comm_volume [--hidden 4096] [--seq 2048] [--batch 4] [--tp 8] [--layers 80]
// The expected values are the formulas written out (V = b·s·d·2, ring 2(P−1)/P·V); the source
// chapter's units paragraph is about its own sizes and is printed only at the defaults.
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

int main(int argc, char** argv) {
  long long d = 4096, s = 2048, b = 4, layers = 80;
  int tp = 8;
  const example::Flags flags("06_comm_volume", argc, argv,
                             {{"hidden", &d}, {"seq", &s}, {"batch", &b}, {"tp", &tp}, {"layers", &layers}});
  const bool defaults = d == 4096 && s == 2048 && b == 4 && tp == 8 && layers == 80;
  const cost::TransformerShape x{.batch = b, .seq = s, .hidden = d, .heads = 32};
  std::printf("Communication per layer, d=%lld s=%lld b=%lld TP=%d, fp16 (2 bytes)\n\n", (long long)x.hidden,
              (long long)x.seq, (long long)x.batch, tp);

  const double V = cost::activation_bytes(x, cost::fp16_bytes);
  const double V_formula = static_cast<double>(b) * static_cast<double>(s) * static_cast<double>(d) * 2.0;  // T·h·e
  std::printf("  activation each all-reduce sums: T·h·e = %lld · %lld · 2 = %.0f B = %.6g MiB (%.1f MB)\n",
              (long long)x.tokens(), (long long)x.hidden, V, V / cost::MiB, V / cost::MB);
  example::check(V == V_formula, example::fmt("T·h·e = %s B = %.6g MiB", example::grouped((long long)V_formula).c_str(),
                                              V_formula / 1048576.0));

  const double ar = cost::all_reduce_bytes_per_rank(V, tp);
  const double ar_formula = 2.0 * (tp - 1) / tp * V_formula;  // a ring all-reduce: reduce-scatter + all-gather
  std::printf("  ring all-reduce, bytes sent per rank: 2(P−1)/P · V = 2·%d/%d · %.6g MiB = %.6g MiB = %.0f B (%.1f MB)\n",
              tp - 1, tp, V / cost::MiB, ar / cost::MiB, ar, ar / cost::MB);
  example::check(example::close(ar, ar_formula, 1e-12),
                 example::fmt("one all-reduce: %.6g MiB = %s B per rank", ar_formula / 1048576.0,
                              example::grouped(std::llround(ar_formula)).c_str()));

  const auto fwd = cost::layer_comm(x, tp, cost::fp16_bytes, false);
  std::printf("  forward: %d all-reduces (attention output g, MLP output g) = %.6g MiB = %.1f MB per rank\n",
              fwd.all_reduces, fwd.bytes_per_rank / cost::MiB, fwd.bytes_per_rank / cost::MB);
  example::check(fwd.all_reduces == 2 && example::close(fwd.bytes_per_rank, 2 * ar_formula, 1e-12),
                 example::fmt("two per layer forward: %.6g MiB", 2 * ar_formula / 1048576.0));
  std::printf("  backward: the same again (the two f's) → 4 all-reduces, %.6g MiB per layer per step\n",
              2 * fwd.bytes_per_rank / cost::MiB);

  const auto sp = cost::layer_comm(x, tp, cost::fp16_bytes, true);
  std::printf("  with sequence parallelism: %d all-gathers + %d reduce-scatters, %.6g MiB: the same bytes\n",
              sp.all_gathers, sp.reduce_scatters, sp.bytes_per_rank / cost::MiB);
  example::check(sp.bytes_per_rank == fwd.bytes_per_rank, "SP moves the same bytes (all-reduce = reduce-scatter + all-gather)");

  const std::string n = std::to_string(layers);
  const char* article = n[0] == '8' || layers == 11 || layers == 18 ? "an" : "a";
  std::printf("  %s %lld-layer model, forward: %lld · %.6g MiB = %.6g GiB per rank per step\n", article, layers, layers,
              fwd.bytes_per_rank / cost::MiB, layers * fwd.bytes_per_rank / cost::GiB);
  example::check(example::close(layers * fwd.bytes_per_rank, layers * 2 * ar_formula, 1e-12),
                 example::fmt("%lld layers: %.6g GiB", layers, layers * 2 * ar_formula / 1073741824.0));

  if (defaults) {  // the source chapter's figures are for these sizes only
    std::printf("\nUnits. The source chapter (seed 001) writes \"112 MB\" and \"224 MB\": its sizes are binary,\n"
                "so these are 112 MiB = 117.4 MB and 224 MiB = 234.9 MB. It then divides \"224 MB\" as\n"
                "2.24e8 bytes by 900 GB/s (249 µs); the correct byte count gives %.0f µs (see 07).\n",
                fwd.bytes_per_rank / 900e9 / cost::microseconds);
    example::check(example::close(fwd.bytes_per_rank / 900e9, 260.978916e-6, 1e-8), "224 MiB at 900 GB/s = 261 µs");
  }
  return example::finish("06_comm_volume");
}
