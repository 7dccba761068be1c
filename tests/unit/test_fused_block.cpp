// One TransformerBlock step (its MLP, norms, attention and dropout) with the fused kernels of
// backend/cpu/fused.hpp against the same layers on Unfused (nn::Fused's primary template), bit for
// bit, on both ISA paths. Its own TU: the block on a second backend instantiates every layer and
// collective again.
#include <doctest/doctest.h>

#include <shardalg/nn.hpp>

#include "fused_support.hpp"
#include "simd_paths.hpp"

using namespace shardalg;
using fused_support::Mat, fused_support::Unfused, fused_support::random, fused_support::same_bits;
using testing::on_each_isa;

TEST_CASE("Mlp and TransformerBlock (fused) against the same layers unfused, fp32, TP 2") {
  on_each_isa([] {
    nn::BlockConfig c;
    c.hidden = 32, c.heads = 4, c.seq = 8, c.ffn = 96, c.dropout = 0.1, c.dropout_seed = 3;
    const Mat<float> X = random<float>(16, c.hidden, 1.0, 31), DY = random<float>(16, c.hidden, 1.0, 32);
    run_ranks(2, [&](ThreadComm& comm) {
      Group g = comm;
      for (auto act : {nn::Activation::gelu_tanh, nn::Activation::swiglu}) {
        nn::BlockConfig ca = c;  // each rank its own copy (a shared one written by both is a race)
        ca.act = act;
        const auto fused = nn::TransformerBlock<float>::init(ca, g, nn::InitConfig{});
        const auto unf = nn::TransformerBlock<float, Unfused>::init(ca, g, nn::InitConfig{});
        const auto x = shard<Replicated>(X, g), dy = shard<Replicated>(DY, g);
        const Sharded<float, Replicated, Unfused> xu(X, X.rows(), X.cols(), g), dyu(DY, DY.rows(), DY.cols(), g);
        auto ff = fused.forward(x);
        auto fu = unf.forward(xu);
        CHECK(same_bits<float>(ff.y.local(), fu.y.local()));
        auto bf = fused.backward(ff.cache, dy);
        auto bu = unf.backward(fu.cache, dyu);
        CHECK(same_bits<float>(bf.dx.local(), bu.dx.local()));
        CHECK(same_bits<float>(bf.params.mlp.fc1.dw.local(), bu.params.mlp.fc1.dw.local()));
        CHECK(same_bits<float>(bf.params.mlp.fc1.db->local(), bu.params.mlp.fc1.db->local()));
        CHECK(same_bits<float>(bf.params.ln1.dgamma.local(), bu.params.ln1.dgamma.local()));
        CHECK(same_bits<float>(bf.params.ln2.dbeta->local(), bu.params.ln2.dbeta->local()));
      }
    });
  });
}
