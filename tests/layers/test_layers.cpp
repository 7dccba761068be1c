// tests/layers/test_layers.cpp — the tensor-parallel layers against their dense twins on thread
// worlds of 1, 2, 3 and 4 ranks (float and double), the dense twins against finite differences
// and the index-keyed RNG. The attention-dropout key and the ledger of a block are in
// test_layers_dropout_ledger.cpp, TP-invariant init and the error texts in test_layers_init_errors.cpp
// (run after these, in that order: doctest orders by file name).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "tp_cases.hpp"

using namespace lt;

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

TEST_CASE("dropout uniform: word col mod 4 of the Philox block at column col / 4; range and moments") {
  // The definition, written out: counter (col / 4, row, tensor lo, tensor hi), key = seed.
  const std::uint64_t seed = 0x123456789abcdefULL, tensor = 0x1f00000011ULL;
  for (Index row : {Index{0}, Index{5}, Index{70000}})
    for (Index col = 0; col < 9; ++col) {
      const auto w = nn::philox4x32_10({static_cast<std::uint32_t>(col / 4), static_cast<std::uint32_t>(row),
                                        static_cast<std::uint32_t>(tensor), static_cast<std::uint32_t>(tensor >> 32)},
                                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
      CHECK(nn::dropout_uniform(seed, tensor, row, col) == std::ldexp(double(w[std::size_t(col % 4)]), -32));
    }
  double su = 0;
  int n = 0, low = 0;
  for (Index i = 0; i < 100; ++i)
    for (Index j = 0; j < 200; ++j, ++n) {
      const double u = nn::dropout_uniform(7, 3, i, j);
      CHECK((u >= 0.0 && u < 1.0));
      su += u;
      low += u < 0.25;
    }
  CHECK(std::abs(su / n - 0.5) < 0.01);
  CHECK(std::abs(low / double(n) - 0.25) < 0.01);
  // Neighbouring columns draw different words of one block; neighbouring blocks differ.
  CHECK(nn::dropout_uniform(7, 3, 1, 4) != nn::dropout_uniform(7, 3, 1, 5));
  CHECK(nn::dropout_uniform(7, 3, 1, 4) != nn::dropout_uniform(7, 3, 1, 0));
  CHECK(nn::dropout_uniform(7, 3, 1, 4) != nn::dropout_uniform(7, 4, 1, 4));
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
                f(i, c) = prob == 0 ? 1.0 : nn::dropout_uniform(7, 11, grow, c) < prob ? 0.0 : 1.0 / (1.0 - prob);
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
