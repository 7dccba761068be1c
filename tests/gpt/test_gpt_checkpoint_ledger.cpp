// tests/gpt/test_gpt_checkpoint_ledger.cpp — checkpoints saved at one TP size and loaded at another
// (and with SP toggled) give the same losses after reload; the ledger of one whole training step.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpt_cases.hpp"
#if SHARDALG_TEST_CHECKPOINTS
#include "shardalg/nn/train/checkpoint.hpp"
#endif
#include "shardalg/nn/train/measured_memory.hpp"
#include "testing.hpp"

using namespace gt;
using ref::M;

#if SHARDALG_TEST_CHECKPOINTS
TEST_CASE("checkpoints: saved at one TP size, loaded at another (and with SP toggled), the same losses after reload") {
  const auto dir = std::filesystem::temp_directory_path() / ("shardalg_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto c = tiny(true);
  constexpr int kBefore = 6, kAfter = 4;
  // The uninterrupted run at TP=2 with SP.
  const auto full = testing::per_rank<std::vector<double>>(2, [&](const Group& g) { return train<double>(c, g, kBefore + kAfter); })[0];
  // Save after kBefore steps at TP=2 (SP).
  testing::per_rank<int>(2, [&](const Group& g) {
    auto model = nn::Gpt<double>::init(c, g);
    nn::Adam<double> opt(adam_options());
    for (int s = 0; s < kBefore; ++s) {
      const auto [x, y] = batch_at(c, kText, s);
      model.forward_backward(x, y);
      model.step(opt, 1.0);
    }
    nn::save_checkpoint(dir, model, opt);
    return 0;
  });
  REQUIRE(std::filesystem::exists(dir / "meta.json"));
  REQUIRE(std::filesystem::exists(dir / "tensors.bin"));
  for (int p : {1, 4}) {
    for (bool sp : {false, true}) {
      CAPTURE(p);
      CAPTURE(sp);
      const auto after = testing::per_rank<std::vector<double>>(p, [&](const Group& g) {
        nn::Adam<double> opt(adam_options());
        auto model = nn::load_checkpoint<double>(dir, g, opt, sp);
        std::vector<double> ls;
        for (int s = kBefore; s < kBefore + kAfter; ++s) {
          const auto [x, y] = batch_at(c, kText, s);
          ls.push_back(model.forward_backward(x, y));
          model.step(opt, 1.0);
        }
        return ls;
      });
      for (const auto& a : after) {
        const std::vector<double> want(full.begin() + kBefore, full.end());
        CHECK(std::abs(a[0] - want[0]) <= 1e-12 * want[0]);  // the first loss after reload
        CHECK(curve_diff(a, want) <= 1e-9);                   // and training goes on identically
      }
    }
  }
  // Weights alone, with a cold optimizer, continue differently: the check above is not vacuous.
  const auto cold = testing::per_rank<double>(1, [&](const Group& g) {
    auto [meta, tensors] = nn::read_checkpoint_files(dir);
    nn::Masters weights;
    for (auto& [k, v] : tensors)
      if (k.rfind("optim.", 0) != 0) weights.emplace(k, v);
    auto model = nn::Gpt<double>::from_masters(c, weights, g);
    model.set_steps(kBefore);
    nn::Adam<double> fresh(adam_options());
    const auto [x, y] = batch_at(c, kText, kBefore);
    model.forward_backward(x, y);
    model.step(fresh, 1.0);
    const auto [x2, y2] = batch_at(c, kText, kBefore + 1);
    return model.loss(x2, y2);
  })[0];
  CHECK(std::abs(cold - full[kBefore + 1]) > 1e-6 * full[kBefore + 1]);
  std::filesystem::remove_all(dir);
}
#endif

TEST_CASE("ledger of one training step: SP moves the same bytes as the all-reduces, plus 2h per norm once per step") {
  using CK = CollectiveKind;
  const int p = 4;
  struct L {
    std::map<std::string, std::vector<std::pair<CK, std::size_t>>> scopes;
    double traffic = 0, traffic_norms = 0;
  };
  auto run = [&](bool sp) {
    return testing::per_rank<L>(p, [&](const Group& comm) {
      Ledger ledger;
      const Group g = ledgered(comm, ledger);
      const auto c = tiny(sp);
      auto model = nn::Gpt<double>::init(c, g);
      nn::Adam<double> opt(adam_options());
      const auto [x, y] = batch_at(c, kText, 0);
      model.forward_backward(x, y);
      {
        auto s = ledger.scope("step");
        model.step(opt, 1.0);
      }
      L out;
      for (const auto& e : ledger.entries()) {
        out.scopes[e.scope].push_back({e.kind, e.elements});
        const double v = double(e.bytes), ring = e.kind == CK::all_reduce ? 2.0 * (p - 1) / p * v : double(p - 1) / p * v;
        if (Ledger::in_scope(e.scope, "grads")) out.traffic_norms += ring;
        else out.traffic += ring;
      }
      return out;
    })[0];
  };
  const auto plain = run(false), sp = run(true);
  const auto c = tiny(true);
  const std::size_t th = c.tokens() * c.hidden, t = c.tokens();
  using V = std::vector<std::pair<CK, std::size_t>>;
  for (int l = 0; l < 2; ++l) {
    const std::string n = "layer" + std::to_string(l);
    CHECK(sp.scopes.at("fwd/" + n + "/attn") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
    CHECK(sp.scopes.at("fwd/" + n + "/mlp") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
    CHECK(sp.scopes.at("bwd/" + n + "/mlp") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
    CHECK(sp.scopes.at("bwd/" + n + "/attn") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
    CHECK(plain.scopes.at("fwd/" + n + "/attn") == V{{CK::all_reduce, th}});
    CHECK(plain.scopes.at("bwd/" + n + "/attn") == V{{CK::all_reduce, th}});
  }
  // Two norms per block and the final norm: 5 all_reduce of 2h (γ ‖ β), once per step.
  CHECK(sp.scopes.at("grads/norm_grads") == V(5, {CK::all_reduce, 2 * c.hidden}));
  CHECK(plain.scopes.count("grads/norm_grads") == 0);
  CHECK(sp.scopes.at("fwd/embedding") == V{{CK::reduce_scatter, th}});
  CHECK(plain.scopes.at("fwd/embedding") == V{{CK::all_reduce, th}});
  CHECK(sp.scopes.at("fwd/loss") == V{{CK::all_reduce, t}, {CK::all_reduce, 2 * t}});
  CHECK(sp.scopes.at("step/grad_norm") == V{{CK::all_reduce, 1}});  // clipping: one scalar
  CHECK(plain.scopes.at("step/grad_norm") == V{{CK::all_reduce, 1}});
  CHECK(sp.traffic == doctest::Approx(plain.traffic).epsilon(1e-15));
  CHECK(sp.traffic_norms == doctest::Approx(5 * 2.0 * (p - 1) / p * 2 * c.hidden * 8).epsilon(1e-15));
  CHECK(plain.traffic_norms == 0);
  MESSAGE("ring bytes per rank of one step at TP=4 (double): " << plain.traffic << " without SP, " << sp.traffic
                                                               << " + " << sp.traffic_norms << " (norm weights) with SP");
}
