// tests/gpt/test_gpt_training.cpp — training gives the same loss curve at TP = 1, 2, 4 with and
// without SP (attention dropout too); activation recomputation trains to the stored run's bits.
// Checkpoints and the ledger of a step: test_gpt_checkpoint_ledger.cpp.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "gpt_cases.hpp"
#include "shardalg/nn/train/measured_memory.hpp"
#include "testing.hpp"

using namespace gt;
using ref::M;

TEST_CASE_TEMPLATE("training: the same loss curve at TP = 1, 2, 4, with and without sequence parallelism", T, float,
                   double) {
  constexpr int kSteps = 25;
  const double bound = std::is_same_v<T, double> ? 1e-9 : 1e-4;
  const auto base = train<T>(tiny(false), Group(SelfComm{}), kSteps);
  double worst_diff = 0;
  for (int p : {1, 2, 4}) {
    for (bool sp : {false, true}) {
      if (p == 1 && !sp) continue;
      CAPTURE(p);
      CAPTURE(sp);
      const auto curves = testing::per_rank<std::vector<double>>(p, [&](const Group& g) { return train<T>(tiny(sp), g, kSteps); });
      for (const auto& cv : curves) {
        const double d = curve_diff(cv, base);
        CHECK(d <= bound);
        worst_diff = std::max(worst_diff, d);
      }
    }
  }
  // The loss falls: from ln(256) ≈ 5.55 at step 0 by more than 1.5 nats in 25 steps.
  CHECK(base.front() > 5.4);
  CHECK(base.back() < base.front() - 1.5);
  MESSAGE(std::string(std::is_same_v<T, double> ? "double" : "float") << ": loss " << base.front() << " -> " << base.back()
                                                            << " in " << kSteps << " steps; largest relative difference "
                                                            << worst_diff << " (bound " << bound << ")");
}

TEST_CASE("training with attention dropout: the same loss curve at TP = 1, 2, 4, with and without SP") {
  constexpr int kSteps = 12;
  auto with = [](bool sp) {
    auto c = tiny(sp);
    c.attn_dropout = 0.1;
    return c;
  };
  const auto base = train<double>(with(false), Group(SelfComm{}), kSteps);
  const auto plain = train<double>(tiny(false), Group(SelfComm{}), kSteps);
  CHECK(curve_diff(base, plain) > 1e-6);  // the option is on: another curve than without it
  double worst_diff = 0;
  for (int p : {1, 2, 4})
    for (bool sp : {false, true}) {
      if (p == 1 && !sp) continue;
      CAPTURE(p);
      CAPTURE(sp);
      const auto curves = testing::per_rank<std::vector<double>>(p, [&](const Group& g) { return train<double>(with(sp), g, kSteps); });
      for (const auto& cv : curves) {
        CHECK(curve_diff(cv, base) <= 1e-9);
        worst_diff = std::max(worst_diff, curve_diff(cv, base));
      }
    }
  CHECK(base.back() < base.front());
  MESSAGE("attention dropout 0.1: loss " << base.front() << " -> " << base.back() << " in " << kSteps
                                         << " steps; largest relative difference at TP 2, 4 (± SP) " << worst_diff
                                         << "; against the run without it " << curve_diff(base, plain));
}

TEST_CASE("activation recomputation: selective and full train to the stored run's bits; the held bytes drop to the formula") {
  // Dropout 0.1 after each sub-layer and 0.1 on the attention probabilities: the masks are
  // regenerated from their keys in the recomputed forward, so every loss is equal, not close.
  const auto cfg = [](bool sp, nn::Recompute r) {
    auto c = tiny(sp);
    c.attn_dropout = 0.1;
    c.recompute = r;
    return c;
  };
  constexpr int kSteps = 4;
  for (bool sp : {false, true})
    for (int p : {1, 2}) {
      if (sp && p == 1) continue;
      CAPTURE(sp);
      CAPTURE(p);
      const auto stored =
          testing::per_rank<std::vector<double>>(p, [&](const Group& g) { return train<double>(cfg(sp, nn::Recompute::none), g, kSteps); });
      for (auto r : {nn::Recompute::selective, nn::Recompute::full}) {
        CAPTURE(static_cast<int>(r));
        const auto again =
            testing::per_rank<std::vector<double>>(p, [&](const Group& g) { return train<double>(cfg(sp, r), g, kSteps); });
        CHECK(again == stored);
      }
    }
  // Bytes held between the forward and the backward (measured from the caches), TP 2, ± SP,
  // against closed forms written here: selective drops the L·b·(a/t)·s² probabilities; full keeps
  // each block's input, L·rows·h values (rows = T, or T/t under SP), and nothing else per layer.
  const auto text = std::string(kText);
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    std::map<int, nn::MemoryReport> rep;
    for (auto r : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full}) {
      const auto c = cfg(sp, r);
      const auto b = batch_at(c, text, 0);
      const auto per = testing::per_rank<nn::MemoryReport>(2, [&](const Group& g) {
        auto model = nn::Gpt<double>::init(c, g);
        nn::Adam<double> adam;
        return nn::measure_memory(model, adam, b.first, b.second);
      });
      rep[static_cast<int>(r)] = per[0];
    }
    const auto c = tiny(sp);
    const double L = static_cast<double>(c.layers), T = static_cast<double>(c.tokens()), h = static_cast<double>(c.hidden);
    const double probs = L * static_cast<double>(c.batch) * (static_cast<double>(c.heads) / 2) * static_cast<double>(c.seq * c.seq) * 8;
    const auto& none = rep[0].held;
    const auto& sel = rep[1].held;
    const auto& full = rep[2].held;
    CHECK(none.scores == probs);
    CHECK(sel.scores == 0);
    CHECK(sel.layers() == none.layers() - probs);
    CHECK(full.layers() == L * (sp ? T / 2 : T) * h * 8);
    CHECK(full.block_input == full.layers());
    CHECK(full.outside() == none.outside());  // the embedding, the stream, the head: unchanged
    for (int r = 0; r < 3; ++r) {  // the library's own formula, term by term where the layers differ
      const auto e = nn::expected_activations(cfg(sp, static_cast<nn::Recompute>(r)), 2, sizeof(double));
      CHECK(rep[r].held.scores == e.scores);
      CHECK(rep[r].held.block_input == e.block_input);
      CHECK(rep[r].held.layers() == e.layers());
    }
  }
}
