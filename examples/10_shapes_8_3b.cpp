// 10 — The 8.3B model's per-GPU weight shapes at TP=8.
//
// Configuration, seed 002: hidden 3072, 72 layers, "24 attention heads of dimension 128", split 8
// ways. The Megatron-LM paper's Table 1 lists 32 heads for the 8.3B model (the scaling study keeps
// 96 dimensions per head: 1536/16, 1920/20, 2304/24, 3072/32); 24 heads of 128 is its head-count
// ablation (16/24/32 heads at 82/80/77% efficiency). Seed 002 itself quotes 77% for the headline
// 8-way run — the 32-head row. We show both: the weight shapes are the same, the heads per GPU differ.
#include <cstdio>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/shardalg.hpp"

namespace cost = shardalg::cost;
using shardalg::LayoutKind;

int main() {
  const long long h = 3072, f = 4 * h, layers = 72, vocab = 51200, positions = 1024;
  const int tp = 8;
  std::printf("8.3B model: hidden %lld, ffn %lld, %lld layers, vocabulary %lld (padded), TP=%d\n\n", h, f, layers,
              vocab, tp);
  struct W { const char* name; long long rows, cols; LayoutKind split; long long er, ec; const char* comm; };
  const W ws[] = {
      {"MLP A (fc1)", h, f, LayoutKind::col, 3072, 1536, "column-split; GeLU local"},
      {"MLP B (fc2)", f, h, LayoutKind::row, 1536, 3072, "row-split; g: all-reduce"},
      {"QKV", h, 3 * h, LayoutKind::col, 3072, 1152, "column-split by heads; attention local"},
      {"attention out", h, h, LayoutKind::row, 384, 3072, "row-split; g: all-reduce"},
      {"embedding (h x v)", h, vocab, LayoutKind::col, 3072, 6400, "vocab-parallel"},
  };
  for (const auto& w : ws) {
    const auto [lr, lc] = shardalg::local_shape(w.split, w.rows, w.cols, tp);
    std::printf("  %-18s %5lld x %-6lld -> %5lld x %-5lld per GPU  (%s)\n", w.name, w.rows, w.cols, (long long)lr,
                (long long)lc, w.comm);
    example::check(lr == w.er && lc == w.ec, std::string(w.name) + ": per-GPU shape");
  }

  std::printf("\nHeads per GPU:\n");
  for (int heads : {32, 24}) {
    cost::check_tp_degree(heads, tp, h, f);
    std::printf("  %d heads of dimension %lld: %d heads per GPU; QKV columns per GPU 3 · %d · %lld = %lld\n", heads,
                h / heads, heads / tp, heads / tp, h / heads, 3 * (heads / tp) * (h / heads));
    example::check(3 * (heads / tp) * (h / heads) == 1152, "the QKV shard holds whole heads (1152 columns)");
  }
  example::check(32 / tp == 4 && 24 / tp == 3, "32 heads: 4 per GPU (paper); 24 heads: 3 per GPU (seed 002)");

  // Parameter count: per layer QKV 3h² + out h² + MLP 8h² weights; biases 3h + h + 4h + h; two
  // LayerNorms 4h. Plus embeddings (v·h + positions·h, positions = 1024 for the GPT-2 family) and
  // the final LayerNorm 2h.
  const long long per_layer = 12 * h * h + 13 * h;
  const long long total = layers * per_layer + vocab * h + positions * h + 2 * h;
  std::printf("\nParameters: 72 · (12h² + 13h) + v·h + 1024·h + 2h = %lld (≈ %.2fB)\n", total, total / 1e9);
  example::check(total == 8317040640LL, "8,317,040,640 parameters: the 8.3B of the name");
  // Per GPU: the split weights and column-parallel biases (12h² + 7h per layer) and the word
  // embedding divide by 8; row-parallel output biases, LayerNorms (6h per layer), position
  // embedding and final LayerNorm are replicated.
  const long long per_gpu = layers * (12 * h * h + 7 * h) / tp + layers * 6 * h + vocab * h / tp + positions * h + 2 * h;
  std::printf("Per GPU: %lld parameters → × 16 B = %.2f GB of training state (< 32 GB)\n", per_gpu,
              per_gpu * cost::mixed_precision_adam_bytes_per_parameter / cost::GB);
  example::check(per_gpu == 1043549184LL, "1,043,549,184 parameters per GPU");
  example::check(example::close(per_gpu * 16.0, 16.696786944e9), "16.70 GB per GPU");
  return example::finish("10_shapes_8_3b");
}
