// tests/layers/test_layers.cpp — the tensor-parallel layers against their dense twins on thread
// worlds of 1, 2, 3 and 4 ranks (float and double), the dense twins against finite differences,
// the ledger of a block, TP-invariant init, the index-keyed RNG and the error texts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "cases.hpp"

namespace {
using namespace lt;

const std::vector<int> kWorlds = {1, 2, 3, 4};

/// The largest error seen per element type, printed once at the end (for the record).
std::map<std::string, std::pair<double, std::string>>& worst() {
  static std::map<std::string, std::pair<double, std::string>> w;
  return w;
}

template <class T, class Fn>
void expect_all(int p, Fn fn) {
  const auto results = testing::per_rank<Checks>(p, [&](const Group& g) { return fn(g); });
  auto& w = worst()[std::is_same_v<T, double> ? "double" : "float"];
  for (int r = 0; r < p; ++r)
    for (const auto& c : results[r]) {
      CHECK_MESSAGE(c.err.within(tol<T>), c.name << " p=" << p << " rank=" << r << ": " << c.err);
      if (c.err.max_rel >= w.first) w = {c.err.max_rel, c.name + " p=" + std::to_string(p)};
    }
  CHECK(!results[0].empty());
}

}  // namespace

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  using nn::philox4x32_10;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == nn::Philox4x32Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        nn::Philox4x32Counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        nn::Philox4x32Counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("index-keyed uniform and normal: range and moments") {
  double su = 0, sn = 0, sn2 = 0;
  int n = 0, low = 0;
  for (Index i = 0; i < 100; ++i)
    for (Index j = 0; j < 200; ++j, ++n) {
      const double u = nn::uniform_at(7, 3, i, j), z = nn::normal_at(7, 3, i, j);
      CHECK((u >= 0.0 && u < 1.0));
      su += u;
      sn += z;
      sn2 += z * z;
      low += u < 0.25;
    }
  CHECK(std::abs(su / n - 0.5) < 0.01);
  CHECK(std::abs(sn / n) < 0.02);
  CHECK(std::abs(std::sqrt(sn2 / n) - 1.0) < 0.02);
  CHECK(std::abs(low / double(n) - 0.25) < 0.01);
  // Different tensors, seeds and indices give different streams.
  CHECK(nn::uniform_at(7, 3, 1, 2) != nn::uniform_at(7, 4, 1, 2));
  CHECK(nn::uniform_at(7, 3, 1, 2) != nn::uniform_at(8, 3, 1, 2));
  CHECK(nn::uniform_at(7, 3, 1, 2) != nn::uniform_at(7, 3, 2, 1));
}

TEST_CASE("dense reference gradients agree with central finite differences") {
  using ref::M;
  constexpr double kFd = 1e-6;
  auto R = [](Index r, Index c, std::uint64_t s, double sc = 1.0) { return rnd<double>(r, c, s, sc); };
  const double sum = 0;
  (void)sum;
  auto dot = [](const M& a, const M& b) { return a.cwiseProduct(b).sum(); };

  SUBCASE("linear") {
    M x = R(5, 6, 1), w = R(6, 4, 2), b = R(1, 4, 3);
    const M dy = R(5, 4, 4);
    const auto g = ref::linear_backward(x, w, dy);
    auto loss = [&] { return dot(dy, ref::linear(x, w, b)); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, w, g.dw) < kFd);
    CHECK(ref::fd_error(loss, b, g.db) < kFd);
  }
  for (auto act : {ref::Act::gelu_tanh, ref::Act::gelu_erf, ref::Act::swiglu}) {
    CAPTURE(static_cast<int>(act));
    ref::Mlp m{R(6, 10, 11, 0.5), R(1, 10, 12), R(6, 10, 13, 0.5), R(1, 10, 14), R(10, 6, 15, 0.5), R(1, 6, 16), act};
    M x = R(5, 6, 17);
    const M dz = R(5, 6, 18);
    const auto g = ref::mlp_backward(m, x, ref::mlp_forward(m, x), dz);
    auto loss = [&] { return dot(dz, ref::mlp_forward(m, x).z); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, m.w1, g.dw1) < kFd);
    CHECK(ref::fd_error(loss, m.b1, g.db1) < kFd);
    CHECK(ref::fd_error(loss, m.w2, g.dw2) < kFd);
    CHECK(ref::fd_error(loss, m.b2, g.db2) < kFd);
    if (act == ref::Act::swiglu) {
      CHECK(ref::fd_error(loss, m.wu, g.dwu) < kFd);
      CHECK(ref::fd_error(loss, m.bu, g.dbu) < kFd);
    }
  }
  for (bool center : {true, false}) {
    CAPTURE(center);
    M gamma = R(1, 8, 21, 0.3);
    gamma.array() += 1;
    ref::Norm n{gamma, center ? R(1, 8, 22) : M(M::Zero(1, 8)), center, 1e-5};
    M x = R(5, 8, 23);
    const M dy = R(5, 8, 24);
    const auto g = ref::norm_backward(n, ref::norm_forward(n, x), dy);
    auto loss = [&] { return dot(dy, ref::norm_forward(n, x).y); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, n.gamma, g.dgamma) < kFd);
    if (center) CHECK(ref::fd_error(loss, n.beta, g.dbeta) < kFd);
  }
  for (Index groups : {4, 2, 1}) {
    CAPTURE(groups);
    // 2 sequences of 4 tokens, hidden 8, 4 heads of 2.
    ref::Attn a{R(8, 8, 31, 0.5), R(1, 8, 32, 0.5), R(8, 2 * groups, 33, 0.5), R(1, 2 * groups, 34, 0.5),
                R(8, 2 * groups, 35, 0.5), R(1, 2 * groups, 36, 0.5), R(8, 8, 37, 0.5), R(1, 8, 38), 4, groups, 4};
    M x = R(8, 8, 39);
    const M dz = R(8, 8, 40);
    const auto g = ref::attn_backward(a, x, ref::attn_forward(a, x), dz);
    auto loss = [&] { return dot(dz, ref::attn_forward(a, x).z); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, a.wq, g.dwq) < kFd);
    CHECK(ref::fd_error(loss, a.bq, g.dbq) < kFd);
    CHECK(ref::fd_error(loss, a.wk, g.dwk) < kFd);
    // Softmax is invariant to a key bias (q·(k + b) shifts a whole score row), so its gradient
    // vanishes: check that, and the differences, in absolute terms.
    CHECK(g.dbk.cwiseAbs().maxCoeff() < 1e-14);
    CHECK(ref::fd_error(loss, a.bk, g.dbk, 1e-5, true) < 1e-9);
    CHECK(ref::fd_error(loss, a.wv, g.dwv) < kFd);
    CHECK(ref::fd_error(loss, a.bv, g.dbv) < kFd);
    CHECK(ref::fd_error(loss, a.wo, g.dwo) < kFd);
    CHECK(ref::fd_error(loss, a.bo, g.dbo) < kFd);
  }
  for (Index groups : {4, 1}) {  // attention dropout: the mask is fixed, so the layer is smooth in its inputs
    CAPTURE(groups);
    ref::Attn a{R(8, 8, 131, 0.5), R(1, 8, 132, 0.5), R(8, 2 * groups, 133, 0.5), R(1, 2 * groups, 134, 0.5),
                R(8, 2 * groups, 135, 0.5), R(1, 2 * groups, 136, 0.5), R(8, 8, 137, 0.5), R(1, 8, 138), 4, groups, 4};
    a.p = 0.3;
    a.seed = 9;
    a.tensor = nn::tensor_id(1, nn::attn_probs_dropout_kind);
    M x = R(8, 8, 139);
    const M dz = R(8, 8, 140);
    const auto o = ref::attn_forward(a, x);
    int dropped = 0;
    for (std::size_t k = 0; k < o.p.size(); ++k)
      for (Index i = 0; i < 4; ++i)
        for (Index j = 0; j <= i; ++j) dropped += o.pd[k](i, j) == 0.0;
    CHECK(dropped > 0);  // some probabilities were dropped (the check below is not the p = 0 one)
    const auto g = ref::attn_backward(a, x, o, dz);
    auto loss = [&] { return dot(dz, ref::attn_forward(a, x).z); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, a.wq, g.dwq) < kFd);
    CHECK(ref::fd_error(loss, a.wk, g.dwk) < kFd);
    CHECK(ref::fd_error(loss, a.wv, g.dwv) < kFd);
    CHECK(ref::fd_error(loss, a.bv, g.dbv) < kFd);
    CHECK(ref::fd_error(loss, a.wo, g.dwo) < kFd);
  }
  for (const auto& bc : block_cases(4)) {
    CAPTURE(bc.groups);
    auto b = make_ref_block(bc, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<double>(r, c, s, sc); });
    M x = R(kTokens, kHidden, 101);
    const M dy = R(kTokens, kHidden, 102);
    const auto g = ref::block_backward(b, x, ref::block_forward(b, x), dy);
    auto loss = [&] { return dot(dy, ref::block_forward(b, x).y); };
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, b.ln1.gamma, g.ln1.dgamma) < kFd);
    CHECK(ref::fd_error(loss, b.ln2.gamma, g.ln2.dgamma) < kFd);
    CHECK(ref::fd_error(loss, b.attn.wq, g.attn.dwq) < kFd);
    CHECK(ref::fd_error(loss, b.attn.wk, g.attn.dwk) < kFd);
    CHECK(ref::fd_error(loss, b.attn.wo, g.attn.dwo) < kFd);
    CHECK(ref::fd_error(loss, b.mlp.w1, g.mlp.dw1) < kFd);
    CHECK(ref::fd_error(loss, b.mlp.w2, g.mlp.dw2) < kFd);
    if (bc.norm == nn::NormKind::layer) CHECK(ref::fd_error(loss, b.ln1.beta, g.ln1.dbeta) < kFd);
    if (bc.bias) CHECK(ref::fd_error(loss, b.mlp.b1, g.mlp.db1) < kFd);
  }
}

TEST_CASE_TEMPLATE("ColumnParallelLinear and RowParallelLinear equal the dense layer", T, float, double) {
  for (int p : kWorlds) expect_all<T>(p, [](const Group& g) { return case_linear<T>(g); });
}

TEST_CASE_TEMPLATE("MLP (GeLU tanh, GeLU erf, SwiGLU) equals the dense MLP", T, float, double) {
  for (int p : kWorlds)
    for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf, nn::Activation::swiglu})
      expect_all<T>(p, [&](const Group& g) { return case_mlp<T>(g, act); });
}

TEST_CASE_TEMPLATE("LayerNorm and RMSNorm on R, Row and C equal the dense norm", T, float, double) {
  for (int p : kWorlds)
    for (auto kind : {nn::NormKind::layer, nn::NormKind::rms})
      expect_all<T>(p, [&](const Group& g) { return case_norm<T>(g, kind); });
}

TEST_CASE_TEMPLATE("dropout: the sharded mask is the dense mask for every layout and world size", T, float, double) {
  for (int p : kWorlds) expect_all<T>(p, [](const Group& g) { return case_dropout<T>(g); });
  // And it drops about p of the elements.
  const M ones = M::Ones(64, 64);
  const M y = ref::dropout(ones, 0.25, 1, 2);
  CHECK(std::abs((y.array() == 0).cast<double>().mean() - 0.25) < 0.02);
}

TEST_CASE_TEMPLATE("causal self-attention (MHA and GQA) equals the dense attention", T, float, double) {
  for (int p : kWorlds)
    for (Index groups : valid_groups(p)) {
      CAPTURE(groups);
      expect_all<T>(p, [&](const Group& g) { return case_attention<T>(g, groups); });
    }
}

namespace {
/// ‖a − r‖ / ‖r‖ (Frobenius).
double rel_error(const M& a, const M& r) { return (a - r).norm() / std::max(r.norm(), 1e-300); }
}  // namespace

// The CPU attention kernel runs the queries in tiles of Kernels::attn_tile rows and skips the
// masked tiles; the layer cases above have 6-token sequences (one tile). Here sequences of one
// partial tile, exactly one, one plus a row, and several with a partial last tile, against a
// per-(sequence, head) dense reference written from the formulas, in double.
TEST_CASE_TEMPLATE("causal attention kernel across query tiles equals the per-head dense reference", T, float, double) {
  using K = nn::Kernels<CpuBackend>;
  const Index tile = K::attn_tile;
  for (const Index seq : {Index(5), tile, tile + 1, 2 * tile + 22})
    for (const double prob : {0.0, 0.3}) {
      CAPTURE(seq);
      CAPTURE(prob);
      const nn::AttnShape s{2, seq, 2, 2, 8};  // 2 sequences, 2 K/V groups of 2 query heads, d = 8
      const nn::AttnDropout drop = prob > 0 ? nn::AttnDropout{prob, 7, 11, 8, 2, 1} : nn::AttnDropout{};
      const Index d = s.head_dim, uw = s.unit_width(), n = seq;
      const M qkv = rnd<T>(s.batch * n, s.units * uw, 301, 2.0), dout = rnd<T>(s.batch * n, s.out_width(), 302);
      // reference
      M o = M::Zero(s.batch * n, s.out_width()), dqkv = M::Zero(qkv.rows(), qkv.cols()), probs(s.batch * 4 * n, n);
      for (Index b = 0; b < s.batch; ++b)
        for (Index u = 0; u < s.units; ++u)
          for (Index j = 0; j < s.q_per_unit; ++j) {
            const Index head = u * s.q_per_unit + j, qc = u * uw + j * d, kc = u * uw + 2 * d, vc = kc + d;
            const M q = qkv.block(b * n, qc, n, d), k = qkv.block(b * n, kc, n, d), v = qkv.block(b * n, vc, n, d);
            M p = M::Zero(n, n), f = M::Zero(n, n);
            for (Index i = 0; i < n; ++i) {
              double mx = -1e300, den = 0;
              for (Index c = 0; c <= i; ++c) mx = std::max(mx, q.row(i).dot(k.row(c)) / std::sqrt(double(d)));
              for (Index c = 0; c <= i; ++c) den += (p(i, c) = std::exp(q.row(i).dot(k.row(c)) / std::sqrt(double(d)) - mx));
              for (Index c = 0; c <= i; ++c) {
                p(i, c) /= den;
                const Index grow = ((drop.batch0 + b) * drop.heads + drop.head0 + head) * n + i;
                f(i, c) = prob == 0 ? 1.0 : nn::uniform_at(7, 11, grow, c) < prob ? 0.0 : 1.0 / (1.0 - prob);
              }
            }
            probs.block(((b * s.units + u) * s.q_per_unit + j) * n, 0, n, n) = p;
            const M pd = p.cwiseProduct(f), dO = dout.block(b * n, head * d, n, d);
            o.block(b * n, head * d, n, d) = pd * v;
            const M dp = (dO * v.transpose()).cwiseProduct(f);
            M ds(n, n);
            for (Index i = 0; i < n; ++i)
              ds.row(i) = p.row(i).cwiseProduct((dp.row(i).array() - dp.row(i).dot(p.row(i))).matrix()) / std::sqrt(double(d));
            dqkv.block(b * n, qc, n, d) += ds * k;
            dqkv.block(b * n, kc, n, d) += ds.transpose() * q;
            dqkv.block(b * n, vc, n, d) += pd.transpose() * dO;
          }
      const testing::Mat<T> qkv_t = qkv.cast<T>(), dout_t = dout.cast<T>();
      const auto f = K::causal_attention(qkv_t, s, drop);
      const auto g = K::causal_attention_grad(qkv_t, f.probs, dout_t, s, drop);
      const M fo = f.out.template cast<double>(), fp = f.probs.template cast<double>(), gd = g.template cast<double>();
      CHECK(rel_error(fo, o) < tol<T>);
      CHECK(rel_error(fp, probs) < tol<T>);
      CHECK(rel_error(gd, dqkv) < tol<T>);
      bool upper_zero = true;  // right of the diagonal the probabilities are exactly 0
      for (Index r = 0; r < fp.rows(); ++r)
        for (Index c = r % n + 1; c < n; ++c) upper_zero = upper_zero && fp(r, c) == 0.0;
      CHECK(upper_zero);
    }
}

TEST_CASE_TEMPLATE("pre-LN transformer block equals the dense block", T, float, double) {
  for (int p : kWorlds)
    for (const auto& bc : block_cases(p)) expect_all<T>(p, [&](const Group& g) { return case_block<T>(g, bc); });
}

TEST_CASE_TEMPLATE("attention dropout: the sharded layer and block equal the dense twins at every TP size", T, float,
                   double) {
  for (int p : kWorlds)
    for (Index groups : valid_groups(p)) {
      CAPTURE(groups);
      expect_all<T>(p, [&](const Group& g) { return case_attention<T>(g, groups, 0.25); });
    }
  for (int p : kWorlds)
    for (auto bc : block_cases(p)) {
      bc.attn_dropout = 0.2;
      expect_all<T>(p, [&](const Group& g) { return case_block<T>(g, bc); });
    }
}

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
