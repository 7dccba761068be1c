// tests/gpt/test_uneven_gpt.cpp — the GPT on shapes that do not divide: GPT-2's vocabulary of
// 50,257 (= 29·1733) with no padding (vocab_divisor 0: E in balanced blocks, 16753, 16752, 16752
// at TP 3), token counts that do not divide TP under sequence parallelism, and a global batch that
// does not divide DP. Against the dense GPT of reference/dense_layers.hpp (loss and every gradient)
// and against one rank's loss curve.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "../mesh/dp_cases.hpp"
#include "gpt_cases.hpp"
#include "testing.hpp"

using namespace gt;

namespace {

/// GPT-2's vocabulary, no padding, a small hidden size; heads (12) divide every TP tried.
nn::GptConfig gpt2_vocab(bool sp) {
  nn::GptConfig c;
  c.vocab = 50257;
  c.vocab_divisor = 0;
  c.hidden = 24;
  c.heads = 12;
  c.ffn = 50;  // the MLP in blocks of 17, 17, 16 at TP 3 (GeLU: any ffn splits)
  c.layers = 1;
  c.seq = 7;
  c.batch = 2;  // 14 tokens: 5, 5, 4 at TP 3; 4, 4, 3, 3 at TP 4
  c.dropout = 0.1;
  c.attn_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.sp = sp;
  c.seed = 50257;
  return c;
}

/// Token ids spread over the whole vocabulary (every rank's block is looked up), the last id once.
Ids spread_ids(const nn::GptConfig& c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> d(0, c.vocab - 1);
  Ids t(static_cast<std::size_t>(c.tokens()));
  for (auto& v : t) v = d(gen);
  t[1] = c.vocab - 1;
  return t;
}

}  // namespace

TEST_CASE("vocabulary 50257 without padding, tokens not dividing TP: the GPT equals the dense GPT, TP 1-4, +- SP") {
  for (int p : {1, 2, 3, 4}) {
    for (bool sp : {false, true}) {
      CAPTURE(p);
      CAPTURE(sp);
      const auto c = gpt2_vocab(sp);
      const nn::Masters masters = nn::Gpt<double>::init(c, Group(SelfComm{})).masters();
      REQUIRE(masters.at("embedding").rows() == 50257);  // no pad row anywhere
      const Ids x = spread_ids(c, 3), y = spread_ids(c, 4);
      struct Out {
        double loss;
        nn::Masters grads;
        std::uint64_t seed;
        Index vocab_rows;
      };
      const auto out = testing::per_rank<Out>(p, [&](const Group& g) {
        auto model = nn::Gpt<double>::from_masters(c, masters, g);
        Out o;
        o.seed = model.dropout_seed();
        o.loss = static_cast<double>(model.forward_backward(x, y));
        o.grads = model.grad_masters();
        o.vocab_rows = model.masters().at("embedding").rows();
        return o;
      });
      const auto r = dense_gpt(c, masters, out[0].seed);
      const auto ro = ref::gpt_forward(r, x, y, c.label_smoothing, c.ignore_index);
      const auto rg = gt::dense_grads(c, ref::gpt_backward(r, x, ro));
      for (const auto& o : out) {
        CHECK(o.vocab_rows == 50257);
        CHECK(std::abs(o.loss - ro.mean) <= 1e-12 * std::abs(ro.mean));
        REQUIRE(o.grads.size() == rg.size());
        for (const auto& entry : rg) {
          const auto& name = entry.first;
          if (name.size() > 7 && name.compare(name.size() - 7, 7, "attn.bk") == 0) continue;  // dL/dbk = 0: noise
          const auto e = compare(o.grads.at(name), entry.second);
          CHECK_MESSAGE(e.within(1e-12), "p=" << p << (sp ? " sp" : "") << " d" << name << ": " << e);
        }
      }
    }
  }
}

TEST_CASE("vocabulary 50257: loss curves at TP 3 (+- SP) and DP 3 equal one rank's <= 1e-12 per step") {
  constexpr int kSteps = 5;
  auto c = gpt2_vocab(false);
  c.batch = 4;  // 28 tokens: 10, 9, 9 at TP 3 under SP; 2, 1, 1 sequences on 3 replicas
  c.dropout = 0.0;
  c.attn_dropout = 0.0;
  auto train_on = [&](const nn::GptConfig& cfg, const Group& g) {
    auto model = nn::Gpt<double>::init(cfg, g);
    nn::Adam<double> opt(adam_options());
    std::vector<double> losses;
    for (int s = 0; s < kSteps; ++s) {
      const Ids x = spread_ids(cfg, 100 + 2 * s), y = spread_ids(cfg, 101 + 2 * s);
      losses.push_back(static_cast<double>(model.forward_backward(x, y)));
      model.step(opt, 1.0);
    }
    return losses;
  };
  const auto one = train_on(c, Group(SelfComm{}));
  CHECK(one.back() < one.front());  // it trains
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    auto cs = c;
    cs.sp = sp;
    for (const auto& curve : testing::per_rank<std::vector<double>>(3, [&](const Group& g) { return train_on(cs, g); }))
      CHECK(curve_diff(curve, one) <= 1e-12);
  }
  // DP 3 (× TP 1 and × TP 2): replicas of 2, 1, 1 sequences, the loss weighted by counted targets.
  for (int t : {1, 2}) {
    CAPTURE(t);
    std::vector<std::vector<double>> curves(static_cast<std::size_t>(3 * t));
    run_ranks(3 * t, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", 3}, {"tp", t}});
      auto model = nn::DataParallelGpt<double>::init(c, mesh);
      nn::Adam<double> opt(adam_options());
      std::vector<double> losses;
      for (int s = 0; s < kSteps; ++s) {
        const Ids x = spread_ids(c, 100 + 2 * s), y = spread_ids(c, 101 + 2 * s);
        losses.push_back(model.forward_backward(x, y));
        model.step(opt, 1.0);
      }
      curves[static_cast<std::size_t>(comm.rank())] = losses;
    });
    for (const auto& curve : curves) CHECK(curve_diff(curve, one) <= 1e-12);
  }
}
