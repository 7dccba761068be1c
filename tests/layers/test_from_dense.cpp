// from_dense checks every master against the config before reading any (issue 12, item 3):
// a null pointer, a wrong shape, a bias given to a bias-free config, an up projection given to a
// GeLU MLP — each a ShapeError naming the layer, the master and both shapes; never a crash and
// never a silent truncation.
#include <doctest/doctest.h>

#include "shardalg/nn/layers/block.hpp"
#include "testing.hpp"

using namespace shardalg;
using M = testing::Mat<double>;

TEST_CASE("Mlp::from_dense refuses masters that do not match the config") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    const M w1 = M::Zero(32, 64), w2 = M::Zero(64, 32), b1 = M::Zero(1, 64), b2 = M::Zero(1, 32);
    const nn::MlpConfig gelu{32, 64, nn::Activation::gelu_tanh, true};
    using Mlp = nn::Mlp<double>;
    // what the issue measured: MlpConfig{32, 32} with a 32×64 W1 used its first 32 columns
    CHECK_THROWS_WITH_AS(Mlp::from_dense(nn::MlpConfig{32, 32, nn::Activation::gelu_tanh, false},
                                         nn::MlpMasters<M>{&w1, nullptr, nullptr, nullptr, &w2, nullptr}, g),
                         "Mlp.from_dense: w1 is 32x64, expected 32x32", ShapeError);
    CHECK_THROWS_WITH_AS(Mlp::from_dense(gelu, nn::MlpMasters<M>{&w1, nullptr, nullptr, nullptr, &w2, &b2}, g),
                         "Mlp.from_dense: b1 is null, expected a 1x64 matrix", ShapeError);
    CHECK_THROWS_WITH_AS(Mlp::from_dense(gelu, nn::MlpMasters<M>{&w1, &b1, &w1, nullptr, &w2, &b2}, g),
                         "Mlp.from_dense: w_up is given but the activation is not SwiGLU (no up projection)",
                         ShapeError);
    CHECK_THROWS_WITH_AS(Mlp::from_dense(nn::MlpConfig{32, 64, nn::Activation::gelu_tanh, false},
                                         nn::MlpMasters<M>{&w1, &b1, nullptr, nullptr, &w2, nullptr}, g),
                         "Mlp.from_dense: b1 is given but the config has no bias", ShapeError);
    CHECK_THROWS_WITH_AS(Mlp::from_dense(gelu, nn::MlpMasters<M>{&w1, &b1, nullptr, nullptr, &w1, &b2}, g),
                         "Mlp.from_dense: w2 is 32x64, expected 64x32", ShapeError);
    CHECK_THROWS_WITH_AS(Mlp::from_dense(nn::MlpConfig{32, 64, nn::Activation::swiglu, true},
                                         nn::MlpMasters<M>{&w1, &b1, nullptr, nullptr, &w2, &b2}, g),
                         "Mlp.from_dense: w_up is null, expected a 32x64 matrix", ShapeError);
    // and the right masters load
    CHECK_NOTHROW((void)Mlp::from_dense(gelu, nn::MlpMasters<M>{&w1, &b1, nullptr, nullptr, &w2, &b2}, g));
  });
}

TEST_CASE("Attention::from_dense refuses masters that do not match the config") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    using Attn = nn::Attention<double>;
    const M wq = M::Zero(32, 32), wkv = M::Zero(32, 16), wo = M::Zero(32, 32), bq = M::Zero(1, 32),
            bkv = M::Zero(1, 16), bo = M::Zero(1, 32), wide = M::Zero(32, 64);
    const nn::AttentionConfig gqa{32, 8, 4, 4, true};  // 8 heads of 4, 4 query groups
    // bias on (the default) with null bias pointers: a segfault before
    CHECK_THROWS_WITH_AS(Attn::from_dense(gqa, nn::AttentionMasters<M>{&wq, nullptr, &wkv, nullptr, &wkv, nullptr, &wo, nullptr}, g),
                         "Attention.from_dense: bq is null, expected a 1x32 matrix", ShapeError);
    // K/V weights holding fewer groups than the config: read out of bounds before
    const M narrow = M::Zero(32, 8);
    CHECK_THROWS_WITH_AS(Attn::from_dense(gqa, nn::AttentionMasters<M>{&wq, &bq, &narrow, &bkv, &wkv, &bkv, &wo, &bo}, g),
                         "Attention.from_dense: wk is 32x8, expected 32x16", ShapeError);
    // 8 heads of 8 on hidden 32: not representable (head_dim is hidden / heads), refused, not truncated
    CHECK_THROWS_WITH_AS(Attn::from_dense(nn::AttentionConfig{32, 8, 0, 4, false},
                                          nn::AttentionMasters<M>{&wide, nullptr, &wide, nullptr, &wide, nullptr, &wo, nullptr}, g),
                         "Attention.from_dense: wq is 32x64, expected 32x32", ShapeError);
    CHECK_NOTHROW((void)Attn::from_dense(gqa, nn::AttentionMasters<M>{&wq, &bq, &wkv, &bkv, &wkv, &bkv, &wo, &bo}, g));
  });
}

TEST_CASE("the linear layers check the bias before reading it") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    const M w = M::Zero(4, 8), narrow = M::Zero(1, 3);
    CHECK_THROWS_WITH_AS(nn::ColumnParallelLinear<double>::from_dense(w, &narrow, g),
                         "from_dense: bias is 1x3, expected 1x8", ShapeError);
    CHECK_THROWS_WITH_AS(nn::RowParallelLinear<double>::from_dense(w, &narrow, g),
                         "from_dense: bias is 1x3, expected 1x8", ShapeError);
  });
}

TEST_CASE("norms and the block check their masters") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    const M gamma = M::Ones(1, 8), beta = M::Zero(1, 8), col = M::Ones(8, 1);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>::from_dense(gamma, static_cast<const M*>(nullptr), nn::NormKind::layer, g),
                         "LayerNorm.from_dense: beta is null, expected a 1x8 matrix", ShapeError);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>::from_dense(gamma, &beta, nn::NormKind::rms, g),
                         "LayerNorm.from_dense: beta is given but RMSNorm has no beta", ShapeError);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>::from_dense(col, static_cast<const M*>(nullptr), nn::NormKind::rms, g),
                         "LayerNorm.from_dense: gamma is 8x1, expected one row (1 x hidden)", ShapeError);
    nn::BlockConfig bc;
    bc.hidden = 8, bc.heads = 2, bc.seq = 2, bc.ffn = 16;
    nn::BlockMasters<M> bm{};
    CHECK_THROWS_WITH_AS(nn::TransformerBlock<double>::from_dense(bc, bm, g),
                         "TransformerBlock.from_dense: ln1_gamma is null, expected a 1x8 matrix", ShapeError);
  });
}
