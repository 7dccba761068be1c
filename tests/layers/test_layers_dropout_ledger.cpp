// tests/layers/test_layers_dropout_ledger.cpp — the attention-dropout key of the layer against its dense
// twin's, and the ledger of a block (after test_layers.cpp: doctest runs the files in name order).
#include <doctest/doctest.h>

#include <cmath>

#include "tp_cases.hpp"

using namespace lt;

TEST_CASE("attention dropout: the mask drops about p of the probabilities, depends on the key, and changes nothing "
          "at p = 0") {
  // The dense twin's mask over 2 sequences × 12 heads × 6 queries × keys ≤ query, p = 0.25.
  auto ra = make_ref_attn(kHeads, 150, true, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<double>(r, c, s, sc); });
  ra.p = 0.25;
  ra.seed = 3;
  ra.tensor = nn::tensor_id(0, nn::attn_probs_dropout_kind);
  int kept = 0, all = 0;
  for (Index b = 0; b < 40; ++b)
    for (Index h = 0; h < kHeads; ++h)
      for (Index i = 0; i < kSeq; ++i)
        for (Index j = 0; j <= i; ++j, ++all) kept += ref::attn_drop_factor(ra, b, h, i, j) != 0.0;
  CHECK(std::abs(1.0 - double(kept) / all - 0.25) < 0.02);
  // The layer's key: rank r of 4 starts at global head 3r; a replica's first sequence is row_base / seq.
  const auto keys = testing::per_rank<nn::AttnDropout>(4, [&](const Group& g) {
    nn::AttentionConfig cfg{kHidden, kHeads, 0, kSeq, true};
    cfg.dropout = 0.25;
    auto attn = nn::Attention<double>::init(cfg, g, {});
    attn.set_dropout_row_base(3 * kSeq);
    return attn.dropout(g);
  });
  for (int r = 0; r < 4; ++r) {
    CHECK(keys[r].head0 == 3 * r);
    CHECK(keys[r].batch0 == 3);
    CHECK(keys[r].heads == kHeads);
  }
  // Bit for bit: every rank's factor at its local head k is the dense twin's at global head 3r + k.
  for (int p : kWorlds) {
    const auto masks = testing::per_rank<nn::AttnDropout>(p, [&](const Group& g) {
      nn::AttentionConfig cfg{kHidden, kHeads, 0, kSeq, true};
      cfg.dropout = ra.p, cfg.dropout_seed = ra.seed, cfg.layer = 0;
      return nn::Attention<double>::init(cfg, g, {}).dropout(g);
    });
    int differ = 0;
    for (const auto& d : masks)
      for (Index b = 0; b < 2; ++b)
        for (Index k = 0; k < kHeads / p; ++k)
          for (Index i = 0; i < kSeq; ++i)
            for (Index j = 0; j <= i; ++j)
              differ += d.factor<double>(b, k, kSeq, i, j) != ref::attn_drop_factor(ra, b, d.head0 + k, i, j);
    CHECK(differ == 0);
  }
  // p = 0: the layer's output and gradients are those of the layer without the option, bit for bit.
  for (int p : {1, 2}) {
    const auto out = testing::per_rank<std::vector<M>>(p, [&](const Group& g) {
      const auto ra0 = make_ref_attn(2, 50, true, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<double>(r, c, s, sc); });
      nn::AttentionConfig with{kHidden, kHeads, 2, kSeq, true, 0.0, 99, 7}, without{kHidden, kHeads, 2, kSeq, true};
      const M x = rnd<double>(kTokens, kHidden, 61), dz = rnd<double>(kTokens, kHidden, 62);
      std::vector<M> r;
      for (const auto& cfg : {with, without}) {
        const auto attn = nn::Attention<double>::from_dense(cfg, masters_of(ra0), g);
        const auto f = attn.forward(shard<Replicated>(testing::Mat<double>(x), g));
        const auto gr = attn.backward(f.cache, shard<Replicated>(testing::Mat<double>(dz), g));
        r.push_back(to_dense(f.z));
        r.push_back(to_dense(gr.dx));
      }
      return r;
    });
    for (const auto& r : out) {
      CHECK(compare(r[0], r[2]).max_abs == 0.0);
      CHECK(compare(r[1], r[3]).max_abs == 0.0);
    }
  }
}

TEST_CASE("ledger: one block is 2 all-reduces of T·h forward and 2 backward, nothing else") {
  const std::size_t th = kTokens * kHidden;
  for (int p : kWorlds) {
    CAPTURE(p);
    const BlockCase mha{nn::NormKind::layer, nn::Activation::gelu_tanh, true, kHeads, 0.1};
    const auto s = testing::per_rank<LedgerSummary>(p, [&](const Group& g) { return ledger_case<double>(g, mha); });
    for (int r = 0; r < p; ++r) {
      CAPTURE(r);
      CHECK(s[r].fwd_all_reduce == 2);
      CHECK(s[r].fwd_total == 2);
      CHECK(s[r].bwd_all_reduce == 2);
      CHECK(s[r].bwd_total == 2);
      CHECK(s[r].fwd_elements == std::vector<std::size_t>{th, th});
      CHECK(s[r].bwd_elements == std::vector<std::size_t>{th, th});
      CHECK(s[r].bwd_kv_sync == 0);
      // Parallel LayerNorm on C: one all-reduce of 2·T each way.
      CHECK(s[r].pln_fwd == 1);
      CHECK(s[r].pln_bwd == 1);
      CHECK(s[r].pln_total == 2);
      CHECK(s[r].pln_fwd_elements == 2 * kTokens);
      CHECK(s[r].pln_bwd_elements == 2 * kTokens);
      CHECK(s[r].total == 6);
    }
    if (p == 4) MESSAGE("ledger at TP=4:\n" << s[0].table);
  }
  SUBCASE("GQA with fewer groups than ranks adds exactly the K/V replica sync") {
    const BlockCase gqa{nn::NormKind::layer, nn::Activation::gelu_tanh, true, 2, 0.0};
    const auto s = testing::per_rank<LedgerSummary>(4, [&](const Group& g) { return ledger_case<double>(g, gqa); });
    for (const auto& r : s) {
      CHECK(r.fwd_total == 2);
      CHECK(r.bwd_total == 3);
      CHECK(r.bwd_kv_sync == 1);
      CHECK(r.bwd_kv_sync_elements == (kHidden + 1) * 2 * 2 * (kHidden / kHeads));
      CHECK(r.bwd_elements == std::vector<std::size_t>{th, th});
    }
  }
}
