// 09 — The memory wall: 16 bytes per parameter under mixed-precision Adam, and the smallest
// power-of-two TP that fits each of Megatron-LM's models on a 32 GB V100.
//
//   09_memory_wall [--params 8.3] [--gpu-gb 32]     (billions of parameters; the GPU's memory in GB)
// The table's four models are Megatron-LM's; at another --gpu-gb the expected TP is the smallest
// power of two p with 16·N/p ≤ capacity, found by the loop written out below, not the paper's.
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

namespace {
/// The smallest power of two p with bytes / p ≤ capacity, by doubling (the hand calculation).
int by_doubling(double bytes, double capacity) {
  int p = 1;
  while (bytes / p > capacity) p *= 2;
  return p;
}
}  // namespace

int main(int argc, char** argv) {
  double billions = 8.3, gpu_gb = 32;
  const example::Flags flags("09_memory_wall", argc, argv, {{"params", &billions}, {"gpu-gb", &gpu_gb}});
  flags.require(billions > 0 && gpu_gb >= 1, "--params must be positive and --gpu-gb at least 1");
  const bool paper_gpu = gpu_gb == 32;  // the paper's choices are for the 32 GB V100
  const double cap = gpu_gb * 1e9;
  const cost::MixedPrecisionAdamBytes m;
  std::printf("Bytes per parameter, mixed-precision Adam:\n");
  std::printf("  fp16 weight %.0f + fp16 gradient %.0f + fp32 master %.0f + Adam m %.0f + Adam v %.0f = %.0f\n", m.weight,
              m.grad, m.master, m.adam_m, m.adam_v, m.per_parameter());
  std::printf("  of which optimizer state and master copy: %.0f\n", m.optimizer_and_master());
  example::check(m.per_parameter() == 16 && m.optimizer_and_master() == 12, "16 bytes, 12 of them optimizer + master");

  const double n = billions * 1e9;
  const std::string gpu = paper_gpu ? "a 32 GB V100" : example::fmt("the %.4g GB GPU", gpu_gb);
  std::printf("\n%.4gB parameters: %.1f GB of training state (%.1f× %s); optimizer + master alone %.1f GB\n",
              billions, cost::training_state_bytes(n) / cost::GB, cost::training_state_bytes(n) / cap, gpu.c_str(),
              cost::training_state_bytes(n, 12) / cost::GB);
  example::check(example::close(cost::training_state_bytes(n), 16 * n, 1e-15),
                 example::fmt("%.4gB × 16 B = %.1f GB ≈ %.0f GB", billions, 16 * billions, 16 * billions));
  example::check(example::close(cost::training_state_bytes(n, 12), 12 * n),
                 example::fmt("%.4gB × 12 B = %.1f GB ≈ %.0f GB", billions, 12 * billions, 12 * billions));

  std::printf("\nSmallest power-of-two TP whose share fits %.4g GB — weights, gradients and optimizer only,\n"
              "activations NOT included (they are what activation checkpointing recovers):\n", gpu_gb);
  std::printf("  %-6s %9s %9s %9s %9s %9s   %s\n", "model", "state GB", "TP=1", "TP=2", "TP=4", "TP=8", "smallest TP");
  struct Row { double params; int expected_gb; int expected_gib; };
  const Row rows[] = {{1.2e9, 1, 1}, {2.5e9, 2, 2}, {4.2e9, 4, 2}, {8.3e9, 8, 4}};
  for (const auto& r : rows) {
    const double st = cost::training_state_bytes(r.params);
    const int tp = cost::smallest_power_of_two_tp(r.params, cap);
    std::printf("  %4.1fB %9.1f %9.1f %9.1f %9.1f %9.1f   %d\n", r.params / 1e9, st / 1e9, st / 1e9, st / 2e9, st / 4e9,
                st / 8e9, tp);
    if (paper_gpu) example::check(tp == r.expected_gb, "the paper's choice for this size");
    else example::check(tp == by_doubling(16 * r.params, cap), "the smallest power of two p with 16·N/p ≤ capacity");
  }
  if (paper_gpu) std::printf("  These are Megatron-LM's choices (1.2B→1, 2.5B→2, 4.2B→4, 8.3B→8), as seed 002 says.\n");

  const double cap_gib = gpu_gb * cost::GiB;
  std::printf("\nGB or GiB? A \"%.4g GB\" %s holds %.4g GiB = %.2fe9 B. Against that capacity:\n", gpu_gb,
              paper_gpu ? "V100" : "GPU", gpu_gb, cap_gib / 1e9);
  for (const auto& r : rows) {
    const int tp = cost::smallest_power_of_two_tp(r.params, cap_gib);
    std::printf("  %4.1fB → TP=%d\n", r.params / 1e9, tp);
    example::check(tp == (paper_gpu ? r.expected_gib : by_doubling(16 * r.params, cap_gib)), example::fmt("smallest TP against %.4g GiB", gpu_gb));
  }
  if (paper_gpu)
    std::printf("  4.2B at TP=2 (33.6 GB) and 8.3B at TP=4 (33.2 GB) would squeeze in — with nothing left for\n"
                "  activations, buffers or fragmentation, so the paper's one-step-larger choices are the sane ones.\n");
  return example::finish("09_memory_wall");
}
