// 09 — The memory wall: 16 bytes per parameter under mixed-precision Adam, and the smallest
// power-of-two TP that fits each of Megatron-LM's models on a 32 GB V100.
#include <cstdio>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

int main() {
  const cost::MixedPrecisionAdamBytes m;
  std::printf("Bytes per parameter, mixed-precision Adam:\n");
  std::printf("  fp16 weight %.0f + fp16 gradient %.0f + fp32 master %.0f + Adam m %.0f + Adam v %.0f = %.0f\n", m.weight,
              m.grad, m.master, m.adam_m, m.adam_v, m.per_parameter());
  std::printf("  of which optimizer state and master copy: %.0f\n", m.optimizer_and_master());
  example::check(m.per_parameter() == 16 && m.optimizer_and_master() == 12, "16 bytes, 12 of them optimizer + master");

  const double n = 8.3e9;
  std::printf("\n8.3B parameters: %.1f GB of training state (%.1f× a 32 GB V100); optimizer + master alone %.1f GB\n",
              cost::training_state_bytes(n) / cost::GB, cost::training_state_bytes(n) / 32e9,
              cost::training_state_bytes(n, 12) / cost::GB);
  example::check(cost::training_state_bytes(n) == 132.8e9, "8.3B × 16 B = 132.8 GB ≈ 133 GB");
  example::check(example::close(cost::training_state_bytes(n, 12), 99.6e9), "8.3B × 12 B = 99.6 GB ≈ 100 GB");

  std::printf("\nSmallest power-of-two TP whose share fits 32 GB — weights, gradients and optimizer only,\n"
              "activations NOT included (they are what activation checkpointing recovers):\n");
  std::printf("  %-6s %9s %9s %9s %9s %9s   %s\n", "model", "state GB", "TP=1", "TP=2", "TP=4", "TP=8", "smallest TP");
  struct Row { double params; int expected_gb; int expected_gib; };
  const Row rows[] = {{1.2e9, 1, 1}, {2.5e9, 2, 2}, {4.2e9, 4, 2}, {8.3e9, 8, 4}};
  for (const auto& r : rows) {
    const double st = cost::training_state_bytes(r.params);
    const int tp = cost::smallest_power_of_two_tp(r.params, 32e9);
    std::printf("  %4.1fB %9.1f %9.1f %9.1f %9.1f %9.1f   %d\n", r.params / 1e9, st / 1e9, st / 1e9, st / 2e9, st / 4e9,
                st / 8e9, tp);
    example::check(tp == r.expected_gb, "the paper's choice for this size");
  }
  std::printf("  These are Megatron-LM's choices (1.2B→1, 2.5B→2, 4.2B→4, 8.3B→8), as seed 002 says.\n");

  std::printf("\nGB or GiB? A \"32 GB\" V100 holds 32 GiB = 34.36e9 B. Against that capacity:\n");
  for (const auto& r : rows) {
    const int tp = cost::smallest_power_of_two_tp(r.params, 32 * cost::GiB);
    std::printf("  %4.1fB → TP=%d\n", r.params / 1e9, tp);
    example::check(tp == r.expected_gib, "smallest TP against 32 GiB");
  }
  std::printf("  4.2B at TP=2 (33.6 GB) and 8.3B at TP=4 (33.2 GB) would squeeze in — with nothing left for\n"
              "  activations, buffers or fragmentation, so the paper's one-step-larger choices are the sane ones.\n");
  return example::finish("09_memory_wall");
}
