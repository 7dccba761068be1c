// 06 — Communication volume of one transformer layer: d=4096, s=2048, b=4, TP=8, fp16.
#include <cstdio>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

int main() {
  const cost::TransformerShape x{.batch = 4, .seq = 2048, .hidden = 4096, .heads = 32};
  const int tp = 8;
  std::printf("Communication per layer, d=%lld s=%lld b=%lld TP=%d, fp16 (2 bytes)\n\n", (long long)x.hidden,
              (long long)x.seq, (long long)x.batch, tp);

  const double V = cost::activation_bytes(x, cost::fp16_bytes);
  std::printf("  activation each all-reduce sums: T·h·e = %lld · %lld · 2 = %.0f B = %.0f MiB (%.1f MB)\n",
              (long long)x.tokens(), (long long)x.hidden, V, V / cost::MiB, V / cost::MB);
  example::check(V == 67108864.0, "T·h·e = 67,108,864 B = 64 MiB");

  const double ar = cost::all_reduce_bytes_per_rank(V, tp);
  std::printf("  ring all-reduce, bytes sent per rank: 2(P−1)/P · V = 2·7/8 · 64 MiB = %.0f MiB = %.0f B (%.1f MB)\n",
              ar / cost::MiB, ar, ar / cost::MB);
  example::check(ar == 117440512.0, "one all-reduce: 112 MiB = 117,440,512 B per rank");

  const auto fwd = cost::layer_comm(x, tp, cost::fp16_bytes, false);
  std::printf("  forward: %d all-reduces (attention output g, MLP output g) = %.0f MiB = %.1f MB per rank\n",
              fwd.all_reduces, fwd.bytes_per_rank / cost::MiB, fwd.bytes_per_rank / cost::MB);
  example::check(fwd.all_reduces == 2 && fwd.bytes_per_rank == 234881024.0, "two per layer forward: 224 MiB");
  std::printf("  backward: the same again (the two f's) → 4 all-reduces, %.0f MiB per layer per step\n",
              2 * fwd.bytes_per_rank / cost::MiB);

  const auto sp = cost::layer_comm(x, tp, cost::fp16_bytes, true);
  std::printf("  with sequence parallelism: %d all-gathers + %d reduce-scatters, %.0f MiB: the same bytes\n",
              sp.all_gathers, sp.reduce_scatters, sp.bytes_per_rank / cost::MiB);
  example::check(sp.bytes_per_rank == fwd.bytes_per_rank, "SP moves the same bytes (all-reduce = reduce-scatter + all-gather)");

  std::printf("  an 80-layer model, forward: 80 · 224 MiB = %.1f GiB per rank per step\n", 80 * fwd.bytes_per_rank / cost::GiB);
  example::check(80 * fwd.bytes_per_rank == 80.0 * 224 * 1048576, "80 layers: 17.5 GiB");

  std::printf("\nUnits. The source chapter (seed 001) writes \"112 MB\" and \"224 MB\": its sizes are binary,\n"
              "so these are 112 MiB = 117.4 MB and 224 MiB = 234.9 MB. It then divides \"224 MB\" as\n"
              "2.24e8 bytes by 900 GB/s (249 µs); the correct byte count gives %.0f µs (see 07).\n",
              fwd.bytes_per_rank / 900e9 / cost::microseconds);
  example::check(example::close(fwd.bytes_per_rank / 900e9, 260.978916e-6, 1e-8), "224 MiB at 900 GB/s = 261 µs");
  return example::finish("06_comm_volume");
}
