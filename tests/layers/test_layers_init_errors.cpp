// tests/layers/test_layers_init_errors.cpp — TP-invariant init, the error texts and, last, the largest
// error that test_layers.cpp's cases saw (doctest runs the files in name order).
#include <doctest/doctest.h>

#include <cmath>

#include "tp_cases.hpp"

using namespace lt;

TEST_CASE_TEMPLATE("init is tensor-parallel invariant: every shard is the master weight's, bit for bit", T, float, double) {
  const std::uint64_t seed = 0xC0FFEE;
  const int layers = 4;
  for (const auto& bc : {BlockCase{nn::NormKind::layer, nn::Activation::gelu_tanh, true, kHeads, 0.0},
                         BlockCase{nn::NormKind::rms, nn::Activation::swiglu, false, 2, 0.0}}) {
    auto cfg = block_config(bc);
    cfg.groups = bc.groups;
    const Index d = kHidden / kHeads;
    auto master = [&](nn::TensorKind k, Index r, Index c, double std) {
      M m(r, c);
      for (Index i = 0; i < r; ++i)
        for (Index j = 0; j < c; ++j)
          m(i, j) = static_cast<double>(static_cast<T>(std * nn::normal_at(seed, nn::tensor_id(cfg.layer, k), i, j)));
      return m;
    };
    const double out_std = 0.02 / std::sqrt(2.0 * layers);
    const M wq = master(nn::TensorKind::attn_q, kHidden, kHidden, 0.02);
    const M wk = master(nn::TensorKind::attn_k, kHidden, bc.groups * d, 0.02);
    const M wv = master(nn::TensorKind::attn_v, kHidden, bc.groups * d, 0.02);
    const M wo = master(nn::TensorKind::attn_proj, kHidden, kHidden, out_std);
    const M w1 = master(nn::TensorKind::mlp_fc1, kHidden, kFfn, 0.02);
    const M wu = master(nn::TensorKind::mlp_up, kHidden, kFfn, 0.02);
    const M w2 = master(nn::TensorKind::mlp_fc2, kFfn, kHidden, out_std);
    const bool glu = bc.act == nn::Activation::swiglu;
    for (int p : {1, 2, 4}) {
      CAPTURE(p);
      auto errs = testing::per_rank<std::vector<double>>(p, [&](const Group& g) {
        const auto blk = nn::TransformerBlock<T>::init(cfg, g, nn::InitConfig{seed, 0.02, layers, 0});
        std::vector<double> e;
        e.push_back(compare(to_dense(blk.attention().qkv().weight()),
                            qkv_physical(wq, wk, wv, kHeads, bc.groups, d, p)).max_abs);
        e.push_back(compare(to_dense(blk.attention().proj().weight()), wo).max_abs);
        e.push_back(compare(to_dense(blk.mlp().fc1().weight()), glu ? swiglu_physical(w1, wu, p) : w1).max_abs);
        e.push_back(compare(to_dense(blk.mlp().fc2().weight()), w2).max_abs);
        e.push_back(compare(to_dense(blk.ln1().gamma()), M(M::Ones(1, kHidden))).max_abs);
        if (bc.bias) e.push_back(compare(to_dense(*blk.mlp().fc1().bias()), M(M::Zero(1, glu ? 2 * kFfn : kFfn))).max_abs);
        return e;
      });
      for (const auto& rank : errs)
        for (double e : rank) CHECK(e == 0.0);
    }
    // The masters have the intended statistics.
    auto sd = [](const M& m) { return std::sqrt((m.array() - m.mean()).square().mean()); };
    CHECK(std::abs(sd(w1) / 0.02 - 1) < 0.1);
    CHECK(std::abs(sd(wu) / 0.02 - 1) < 0.1);
    CHECK(std::abs(sd(w2) / out_std - 1) < 0.1);
    CHECK(std::abs(sd(wq) / 0.02 - 1) < 0.15);
  }
}

TEST_CASE("bad input: typed errors with exact text") {
  using nn::AttentionConfig;
  auto on = [](int p, auto fn) { run_ranks(p, [&](ThreadComm& c) { fn(Group(c)); }); };
  CHECK_THROWS_WITH_AS(on(6, [](const Group& g) { nn::Attention<double>::init({64, 32, 0, 4, true}, g, {}); }),
                       "Attention: 32 heads are not divisible by tensor-parallel size 6", DivisibilityError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) { nn::Attention<double>::init({50, 12, 0, 4, true}, g, {}); }),
                       "Attention: hidden size 50 is not divisible by 12 heads", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) { nn::Attention<double>::init({48, 12, 5, 4, true}, g, {}); }),
                       "Attention: 12 heads are not divisible by 5 query groups", ShapeError);
  CHECK_THROWS_WITH_AS(on(4, [](const Group& g) { nn::Attention<float>::init({48, 12, 6, 4, true}, g, {}); }),
                       "Attention: 6 query groups are neither a multiple nor a divisor of tensor-parallel size 4",
                       DivisibilityError);
  // Under SwiGLU each rank holds one block of gate and one of up in a fused weight: F must divide.
  CHECK_THROWS_WITH_AS(on(4, [](const Group& g) { nn::Mlp<double>::init({24, 50, nn::Activation::swiglu, true}, g, {}); }),
                       "Mlp (SwiGLU): ffn size 50 is not divisible by tensor-parallel size 4", DivisibilityError);
  // Elsewhere any size splits in balanced blocks: 10 on 4 ranks is 3, 3, 2, 2.
  on(4, [](const Group& g) {
    const Index want = g.rank() < 2 ? 3 : 2;
    CHECK(nn::Mlp<double>::init({24, 10, nn::Activation::gelu_tanh, true}, g, {}).fc1().weight().local_cols() == want);
    CHECK(nn::ColumnParallelLinear<double>::init(8, 10, true, g, {1, 0.02}, 1).weight().local_cols() == want);
    CHECK(nn::RowParallelLinear<double>::init(10, 8, true, g, {1, 0.02}, 1).weight().local_rows() == want);
    CHECK(nn::ParallelLayerNorm<double>::init(10, nn::NormKind::layer, g).gamma().local_cols() == want);
  });
  auto block_cfg = [] {
    nn::BlockConfig c;
    c.hidden = 64;
    c.heads = 32;
    c.seq = 4;
    c.ffn = 96;
    return c;
  };
  CHECK_THROWS_WITH_AS(on(6, [&](const Group& g) { nn::TransformerBlock<double>::init(block_cfg(), g, {}); }),
                       "Attention: 32 heads are not divisible by tensor-parallel size 6", DivisibilityError);
  // The residual cotangent of a fused norm backward must have the cotangent's shape.
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto ln = nn::LayerNorm<double>::init(8, nn::NormKind::rms, g);
                         const auto f = ln.forward(shard<Replicated>(testing::random_real<double>(4, 8, 1), g));
                         (void)ln.backward_add(f.cache, shard<Replicated>(testing::random_real<double>(4, 8, 2), g),
                                               shard<Replicated>(testing::random_real<double>(5, 8, 3), g));
                       }),
                       "RMSNorm.backward_add: shapes differ: 4x8 and 5x8", ShapeError);
  // Shapes that do not chain.
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto l = nn::ColumnParallelLinear<double>::init(8, 8, true, g, {1, 0.02}, 1);
                         (void)l.forward(shard<Replicated>(testing::random_real<double>(4, 7, 1), g));
                       }),
                       "ColumnParallelLinear: input has 7 columns, expected 8", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto l = nn::RowParallelLinear<double>::init(8, 8, true, g, {1, 0.02}, 1);
                         (void)l.forward(shard<ColSharded>(testing::random_real<double>(4, 6, 1), g));
                       }),
                       "RowParallelLinear: input has 6 columns, expected 8", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto m = nn::Mlp<double>::init({24, 48, nn::Activation::swiglu, false}, g, {});
                         (void)m.forward(shard<Replicated>(testing::random_real<double>(4, 7, 1), g));
                       }),
                       "Mlp: input has 7 columns, expected 24", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto a = nn::Attention<double>::init({24, 12, 0, 6, true}, g, {});
                         (void)a.forward(shard<Replicated>(testing::random_real<double>(10, 24, 1), g));
                       }),
                       "Attention: 10 rows are not a whole number of sequences of length 6", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) {
                         const auto n = nn::LayerNorm<double>::init(24, nn::NormKind::layer, g);
                         (void)n.forward(shard<RowSharded>(testing::random_real<double>(4, 7, 1), g));
                       }),
                       "LayerNorm: input has 7 columns, expected 24", ShapeError);
  CHECK_THROWS_WITH_AS(on(1, [](const Group&) { nn::Dropout(1.0, 0, 0); }), "Dropout: probability 1 is outside [0, 1)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [](const Group& g) { nn::Attention<double>::init({24, 12, 0, 6, true, 1.5}, g, {}); }),
                       "Attention: attention dropout 1.5 is outside [0, 1)", ShapeError);
  CHECK_THROWS_WITH_AS(on(1, [&](const Group& g) {
                         auto c = block_cfg();
                         c.attn_dropout = -0.1;
                         nn::TransformerBlock<double>::init(c, g, {});
                       }),
                       "Attention: attention dropout -0.1 is outside [0, 1)", ShapeError);
}

TEST_CASE("z: largest relative error observed against the dense references") {
  for (const auto& [type, w] : worst()) MESSAGE(type << ": " << w.first << " (" << w.second << ")");
  CHECK(true);
}
