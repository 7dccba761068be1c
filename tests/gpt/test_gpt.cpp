// tests/gpt/test_gpt.cpp — the GPT against the dense GPT of reference/dense_layers.hpp (loss and every
// gradient, TP 1–4, with and without sequence parallelism, float and double); training that gives
// the same loss curve at TP = 1, 2, 4 with and without SP; checkpoints saved at one TP size and
// loaded at another; the ledger of a whole step; the configuration errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gpt_cases.hpp"
#if SHARDALG_TEST_CHECKPOINTS
#include "shardalg/nn/train/checkpoint.hpp"
#endif
#include "shardalg/nn/train/measured_memory.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "testing.hpp"

using namespace gt;
using ref::M;

namespace {

template <class T>
constexpr double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;

/// A small model for the dense comparison: GQA with 2 groups (K/V copied at TP=4 ranks), or MHA.
nn::GptConfig small(bool rms_swiglu_gqa, bool sp) {
  nn::GptConfig c;
  c.vocab = 40;
  c.hidden = 16;
  c.heads = 4;
  c.groups = rms_swiglu_gqa ? 2 : 0;
  c.ffn = 32;
  c.layers = 2;
  c.seq = 6;
  c.batch = 2;
  c.activation = rms_swiglu_gqa ? nn::Activation::swiglu : nn::Activation::gelu_tanh;
  c.norm = rms_swiglu_gqa ? nn::NormKind::rms : nn::NormKind::layer;
  c.bias = !rms_swiglu_gqa;
  c.eps = 1.0 / 131072;
  c.dropout = rms_swiglu_gqa ? 0.0 : 0.15;
  c.label_smoothing = rms_swiglu_gqa ? 0.1 : 0.0;
  c.sp = sp;
  c.seed = 77;
  c.vocab_divisor = 8;
  return c;
}

/// Logical masters, written from the names alone (random values rounded to T).
template <class T>
nn::Masters make_masters(const nn::GptConfig& c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto rnd = [&](Index r, Index k, double scale, double shift = 0.0) {
    M m(r, k);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < k; ++j) m(i, j) = static_cast<double>(static_cast<T>(shift + scale * u(gen)));
    return m;
  };
  const Index h = c.hidden, d = h / c.heads, g = c.groups ? c.groups : c.heads, f = c.ffn_size();
  const bool center = c.norm == nn::NormKind::layer, glu = c.activation == nn::Activation::swiglu;
  nn::Masters m;
  m["embedding"] = rnd(c.vocab, h, 0.5);
  auto norm = [&](const std::string& n) {
    m[n + ".gamma"] = rnd(1, h, 0.2, 1.0);
    if (center) m[n + ".beta"] = rnd(1, h, 0.2);
  };
  for (Index l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    norm(p + "ln1");
    m[p + "attn.wq"] = rnd(h, c.heads * d, 0.4);
    m[p + "attn.wk"] = rnd(h, g * d, 0.4);
    m[p + "attn.wv"] = rnd(h, g * d, 0.4);
    m[p + "attn.wo"] = rnd(h, h, 0.3);
    if (c.bias) {
      m[p + "attn.bq"] = rnd(1, c.heads * d, 0.2);
      m[p + "attn.bk"] = rnd(1, g * d, 0.2);
      m[p + "attn.bv"] = rnd(1, g * d, 0.2);
      m[p + "attn.bo"] = rnd(1, h, 0.2);
    }
    norm(p + "ln2");
    m[p + "mlp.w1"] = rnd(h, f, 0.4);
    if (glu) m[p + "mlp.w_up"] = rnd(h, f, 0.4);
    m[p + "mlp.w2"] = rnd(f, h, 0.3);
    if (c.bias) {
      m[p + "mlp.b1"] = rnd(1, f, 0.2);
      if (glu) m[p + "mlp.b_up"] = rnd(1, f, 0.2);
      m[p + "mlp.b2"] = rnd(1, h, 0.2);
    }
  }
  norm("final_norm");
  return m;
}

Ids small_tokens(const nn::GptConfig& c, std::uint64_t seed, bool with_ignored) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> d(0, c.vocab - 1);
  Ids t(static_cast<std::size_t>(c.tokens()));
  for (auto& v : t) v = d(gen);
  t[0] = c.vocab - 1;
  if (with_ignored) t[3] = c.ignore_index;
  return t;
}

struct Worst {
  double rel = 0;
  std::string what;
};
Worst& worst(bool dbl) {
  static Worst w[2];
  return w[dbl ? 1 : 0];
}

}  // namespace

TEST_CASE_TEMPLATE("GPT equals the dense GPT: loss and every gradient, TP 1-4, with and without SP", T, float, double) {
  for (int variant : {0, 1, 2}) {  // 2: variant 0 with attention dropout
    for (int p : {1, 2, 4}) {
      for (bool sp : {false, true}) {
        auto c = small(variant == 1, sp);
        if (variant == 2) c.attn_dropout = 0.2;
        CAPTURE(variant);
        CAPTURE(p);
        CAPTURE(sp);
        const auto masters = make_masters<T>(c, 900 + variant);
        const Ids x = small_tokens(c, 11, false), y = small_tokens(c, 12, variant);
        struct Out {
          double loss;
          nn::Masters grads, weights;
          std::uint64_t seed;
        };
        const auto out = testing::per_rank<Out>(p, [&](const Group& g) {
          auto model = nn::Gpt<T>::from_masters(c, masters, g);
          Out o;
          o.seed = model.dropout_seed();
          o.loss = static_cast<double>(model.forward_backward(x, y));
          o.grads = model.grad_masters();
          o.weights = model.masters();
          return o;
        });
        const auto r = dense_gpt(c, masters, out[0].seed);
        const auto ro = ref::gpt_forward(r, x, y, c.label_smoothing, c.ignore_index);
        const auto rg = gt::dense_grads(c, ref::gpt_backward(r, x, ro));
        const std::string tag = std::string(variant == 1   ? "rms.swiglu.gqa2.smooth"
                                            : variant == 2 ? "ln.gelu.bias.dropout.attn_dropout"
                                                           : "ln.gelu.bias.dropout") +
                                " p=" +
                                std::to_string(p) + (sp ? " sp" : "");
        for (const auto& o : out) {
          CHECK(o.weights == masters);  // load ∘ unmap is the identity, at every TP size
          const double le = std::abs(o.loss - ro.mean) / std::abs(ro.mean);
          CHECK_MESSAGE(le <= tol<T>, tag << " loss " << o.loss << " vs " << ro.mean);
          REQUIRE(o.grads.size() == rg.size());
          for (const auto& entry : rg) {
            const auto& name = entry.first;  // plain names: Clang 14 cannot capture a structured binding
            const auto& want = entry.second;
            auto e = compare(o.grads.at(name), want);
            if (name.size() > 7 && name.compare(name.size() - 7, 7, "attn.bk") == 0) {
              // Softmax ignores a constant added to every key of a row, so dL/dbk is 0 exactly
              // and the dense value is rounding noise: measure against the fused QKV bias gradient,
              // as the layer tests of issue 3 do.
              const std::string pre = name.substr(0, name.size() - 2);
              const double scale = std::max(rg.at(pre + "bq").cwiseAbs().maxCoeff(), rg.at(pre + "bv").cwiseAbs().maxCoeff());
              CHECK(want.cwiseAbs().maxCoeff() <= 1e-14 * scale);
              e.max_rel = e.max_abs / scale;
            }
            CHECK_MESSAGE(e.within(tol<T>), tag << " d" << name << ": " << e);
            auto& w = worst(std::is_same_v<T, double>);
            if (e.max_rel >= w.rel) w = {e.max_rel, tag + " d" + name};
          }
        }
      }
    }
  }
}

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

TEST_CASE("bad configurations and inputs: typed errors with exact text") {
  auto on = [](int p, auto fn) { run_ranks(p, [&](ThreadComm& comm) { fn(Group(comm)); }); };
  auto c = tiny(false);
  c.heads = 6;
  c.hidden = 36;
  CHECK_THROWS_WITH_AS(on(4, [&](const Group& g) { (void)nn::Gpt<double>::init(c, g); }),
                       "Attention: 6 heads are not divisible by tensor-parallel size 4", DivisibilityError);
  c = tiny(false);
  c.ffn = 30;
  c.activation = nn::Activation::swiglu;  // SwiGLU's fused gate|up needs F divisible by P; GeLU's does not
  CHECK_THROWS_WITH_AS(on(4, [&](const Group& g) { (void)nn::Gpt<double>::init(c, g); }),
                       "Mlp (SwiGLU): ffn size 30 is not divisible by tensor-parallel size 4", DivisibilityError);
  // 30 tokens on 4 ranks under sequence parallelism are blocks of 8, 8, 7, 7 (tests/gpt/test_uneven_gpt.cpp).
  c = tiny(false);
  c.layers = 0;
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::init(c, Group(SelfComm{})), "Gpt: 0 layers; a model needs at least 1",
                       ShapeError);
  c = tiny(false);
  c.vocab = 0;
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::init(c, Group(SelfComm{})), "vocabulary size 0 must be at least 1",
                       ShapeError);
  c = tiny(false);
  c.dropout = 1.0;
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::init(c, Group(SelfComm{})), "Gpt: dropout 1 is outside [0, 1)", ShapeError);
  c = tiny(false);
  c.attn_dropout = 1.0;
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::init(c, Group(SelfComm{})), "Gpt: attn_dropout 1 is outside [0, 1)",
                       ShapeError);
  c = tiny(false);
  auto model = nn::Gpt<double>::init(c, Group(SelfComm{}));
  const Ids x(63, 1), y(64, 1), x64(64, 1);
  CHECK_THROWS_WITH_AS(model.forward_backward(x, y), "Gpt: 63 tokens, expected batch × seq = 4 × 16 = 64", ShapeError);
  CHECK_THROWS_WITH_AS(model.forward_backward(x64, x), "Gpt: 63 targets for 64 tokens", ShapeError);
  Ids bad = x64;
  bad[5] = 300;
  CHECK_THROWS_WITH_AS(model.forward_backward(bad, y),
                       "VocabParallelEmbedding: token id 300 is out of range for vocabulary 256", ShapeError);
  nn::Adam<double> opt;
  CHECK_THROWS_WITH_AS(model.step(opt), "Gpt: step() without gradients; call forward_backward first", ShapeError);
  nn::Masters m = model.masters();
  m.erase("layers.1.attn.wk");
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::from_masters(c, m, Group(SelfComm{})),
                       "Gpt: checkpoint has no tensor layers.1.attn.wk", ShapeError);
  m = model.masters();
  m["embedding"] = M::Zero(255, 32);
  CHECK_THROWS_WITH_AS((void)nn::Gpt<double>::from_masters(c, m, Group(SelfComm{})),
                       "Gpt: checkpoint tensor embedding is 255x32, expected 256x32", ShapeError);
}

TEST_CASE("z: largest relative error of the GPT against the dense GPT") {
  MESSAGE("float: " << worst(false).rel << " (" << worst(false).what << ")");
  MESSAGE("double: " << worst(true).rel << " (" << worst(true).what << ")");
  CHECK(worst(true).rel <= 1e-12);
  CHECK(worst(false).rel <= 1e-5);
}
