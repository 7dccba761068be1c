// tests/gpt/test_vocab_parallel.cpp — the vocabulary-parallel embedding, the tied LM head and the
// fused vocab-parallel cross-entropy against dense twins written independently in plain Eigen
// (double, column-major, whole matrices), on thread worlds of 1, 2, 3 and 4 ranks, float and
// double; Megatron's own oracle; the ledger; label smoothing at TP > 1; the error texts.
#include <doctest/doctest.h>

#include "vocab_cases.hpp"

// =============================================================================================
// Megatron's oracle
// =============================================================================================
TEST_CASE("Megatron's oracle: TP=4, logits 0..7 repeated to 16x32 per rank, targets 0, 2, ..., 30") {
  // The closed form, computed here independently: log(16 · Σ_{k<8} e^k) − (t mod 8).
  double s8 = 0;
  for (int k = 0; k < 8; ++k) s8 += std::exp(double(k));
  const double lse = std::log(16.0 * s8);
  CHECK(std::round(lse * 1e4) / 1e4 == doctest::Approx(10.2309).epsilon(1e-12));

  Ids targets(16);
  for (int i = 0; i < 16; ++i) targets[i] = 2 * i;
  struct Out {
    M losses, grad;
    double mean;
  };
  const auto out = testing::per_rank<Out>(4, [&](const Group& g) {
    Mat<double> local(16, 32);
    for (Index i = 0; i < 16; ++i)
      for (Index j = 0; j < 32; ++j) local(i, j) = static_cast<double>(j % 8);
    const Sharded<double, ColSharded> z(local, 16, 128, g);
    const nn::VocabParallelCrossEntropy<double> ce(128);
    auto f = ce.forward(z, targets);
    return Out{to_dense(f.losses), to_dense(ce.backward_mean(f.cache)), f.mean};
  });
  const double expect4[4] = {10.2309, 8.2309, 6.2309, 4.2309};
  double mean = 0;
  for (int i = 0; i < 16; ++i) {
    const double closed = lse - double(targets[i] % 8);
    mean += closed / 16;
    for (const auto& o : out) {
      CHECK(std::abs(o.losses(i, 0) - closed) <= 1e-12 * closed);
      CHECK(std::round(o.losses(i, 0) * 1e4) / 1e4 == doctest::Approx(expect4[i % 4]).epsilon(1e-12));
    }
  }
  for (const auto& o : out) CHECK(std::abs(o.mean - mean) <= 1e-12 * mean);
  // The gradient of the mean: (softmax − onehot)/16, softmax_j = e^{j mod 8} / (16 Σ_{k<8} e^k).
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 128; ++j) {
      const double want = (std::exp(double(j % 8)) / (16.0 * s8) - (j == targets[i] ? 1.0 : 0.0)) / 16.0;
      CHECK(std::abs(out[0].grad(i, j) - want) <= 1e-15);
    }
}

// =============================================================================================
// The dense twins against finite differences
// =============================================================================================
TEST_CASE("dense twins: gradients agree with central finite differences") {
  const M x = 3.0 * testing::random_real<double>(kT, kVocab, 11).cast<double>();
  for (double eps : {0.0, 0.1}) {
    CAPTURE(eps);
    const Ids tg = make_targets(5, true);
    const auto r = ref::cross_entropy(x, tg, kIgnore, eps);
    CHECK(r.count == kT - 2);
    CHECK(r.dmean.row(4).cwiseAbs().maxCoeff() == 0.0);
    const double e = ref::fd_error([&](const M& xx) { return ref::cross_entropy(xx, tg, kIgnore, eps).mean; }, x, r.dmean, 1e-5);
    CHECK(e < 1e-9);
    MESSAGE("finite-difference error of the dense loss gradient, eps=" << eps << ": " << e);
    // Label smoothing's target distribution sums to 1: Σ_j (p − q) = 0 per row.
    CHECK(r.dloss.rowwise().sum().cwiseAbs().maxCoeff() < 1e-14);
  }
  // The tied chain: E → lookup → head → loss, d mean / d E.
  const M e = testing::random_real<double>(kVocab, kH, 3).cast<double>();
  const Ids ids = make_ids(7), tg = make_targets(8, true);
  const auto r = ref::tied(e, ids, tg, kIgnore, 0.1);
  const double err = ref::fd_error([&](const M& ee) { return ref::tied(ee, ids, tg, kIgnore, 0.1).ce.mean; }, e, r.de, 1e-5);
  CHECK(err < 1e-9);
  MESSAGE("finite-difference error of the tied chain's dE: " << err);
}

// =============================================================================================
// The fused cross-entropy against the dense one
// =============================================================================================
TEST_CASE_TEMPLATE("fused vocab-parallel cross-entropy equals the dense loss (ignore_index, label smoothing, padding)",
                   T, float, double) {
  const M real = 4.0 * testing::random_real<double>(kT, kVocab, 21).cast<double>();
  const M x = rounded<T>(real);
  const M upstream = rounded<T>(testing::random_real<double>(kT, 1, 22).cast<double>());
  for (int p : kWorlds) {
    for (double eps : {0.0, 0.1}) {
      for (bool ignored : {false, true}) {
        CAPTURE(p);
        CAPTURE(eps);
        CAPTURE(ignored);
        const Ids tg = make_targets(23, ignored);
        const auto r = ref::cross_entropy(x, tg, kIgnore, eps);
        const Index vp = nn::padded_vocab(kVocab, kDivisor, p);
        const auto o = run_ce<T>(p, pad_logits(x, vp), tg, eps, upstream);
        const std::string tag = "ce p=" + std::to_string(p) + " eps=" + std::to_string(eps) + (ignored ? " ignore" : "");
        check_rel<T>(compare(o.losses, M(r.loss)), tag + " losses");
        check_rel<T>(compare(M::Constant(1, 1, o.mean), M::Constant(1, 1, r.mean)), tag + " mean");
        CHECK(o.count == r.count);
        check_rel<T>(compare(M(o.dmean.leftCols(kVocab)), r.dmean), tag + " dlogits (mean)");
        // Upstream per-token gradients: row t of dlogits is g_t · (p − q)_t.
        const M want = upstream.col(0).asDiagonal() * r.dloss;
        check_rel<T>(compare(M(o.dlosses.leftCols(kVocab)), want), tag + " dlogits (per token)");
        // Pad columns are never predicted: exactly zero gradient.
        CHECK(o.dmean.rightCols(vp - kVocab).cwiseAbs().maxCoeff() == 0.0);
        CHECK(o.dlosses.rightCols(vp - kVocab).cwiseAbs().maxCoeff() == 0.0);
        if (ignored) {
          CHECK(o.losses(4, 0) == 0.0);
          CHECK(o.dmean.row(9).cwiseAbs().maxCoeff() == 0.0);
          CHECK(o.dlosses.row(4).cwiseAbs().maxCoeff() == 0.0);
        }
      }
    }
  }
}

TEST_CASE("cross-entropy: every token ignored gives mean 0 and zero gradients") {
  const M x = testing::random_real<double>(4, 8, 1).cast<double>();
  const auto o = run_ce<double>(2, x, Ids(4, kIgnore), 0.0, M::Ones(4, 1), 8);
  CHECK(o.count == 0);
  CHECK(o.mean == 0.0);
  CHECK(o.losses.cwiseAbs().maxCoeff() == 0.0);
  CHECK(o.dmean.cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE("cross-entropy: a rank whose columns are all padding contributes nothing") {
  // vocab 20 padded to 32 at TP=4: rank 2 holds 16..23 (4 real), rank 3 holds 24..31 (all pad).
  const M x = 3.0 * testing::random_real<double>(kT, 20, 61).cast<double>();
  const Ids tg = {0, 19, 16, 3, 17, 5, 18, 7, 8, 9, 10, 15};
  for (double eps : {0.0, 0.2}) {
    CAPTURE(eps);
    const auto r = ref::cross_entropy(x, tg, kIgnore, eps);
    const auto o = [&] {
      const auto out = testing::per_rank<CeOut>(4, [&](const Group& g) {
        auto z = shard<ColSharded>(row_major<double>(pad_logits(x, 32)), g);
        const nn::VocabParallelCrossEntropy<double> ce(20, {kIgnore, eps});
        auto f = ce.forward(z, tg);
        CeOut c;
        c.losses = to_dense(f.losses);
        c.mean = f.mean;
        c.dmean = to_dense(ce.backward_mean(f.cache));
        return c;
      });
      return out[0];
    }();
    CHECK(compare(o.losses, M(r.loss)).within(1e-12));
    CHECK(std::abs(o.mean - r.mean) <= 1e-12 * r.mean);
    CHECK(compare(M(o.dmean.leftCols(20)), r.dmean).within(1e-12));
    CHECK(o.dmean.rightCols(12).cwiseAbs().maxCoeff() == 0.0);
  }
}

// =============================================================================================
// Label smoothing at TP > 1
// =============================================================================================
TEST_CASE("label smoothing: TP=2 and 4 equal the dense TP=1 loss; Megatron's local-partition form does not") {
  constexpr Index v = 48;  // no padding: the difference below is the smoothing alone
  const double eps = 0.1;
  const M x = 3.0 * testing::random_real<double>(kT, v, 31).cast<double>();
  Ids tg(kT);
  for (Index i = 0; i < kT; ++i) tg[i] = (7 * i + 3) % v;
  const auto r = ref::cross_entropy(x, tg, kIgnore, eps);

  auto sharded = [&](int p) {
    return testing::per_rank<M>(p, [&](const Group& g) {
      const nn::VocabParallelCrossEntropy<double> ce(v, {kIgnore, eps});
      return M(to_dense(ce.forward(shard<ColSharded>(row_major<double>(x), g), tg).losses));
    })[0];
  };
  const M tp1 = sharded(1);
  CHECK(compare(tp1, M(r.loss)).within(1e-12));

  // Megatron-LM's form on rank r's partition: smoothing = ε_M·V_r/(V_r − 1) and the mean of log p
  // over the V_r local columns (p the correct global softmax), loss_r = (1−s)·nll − s·mean_r log p.
  // Megatron's ε_M spreads over the V − 1 other classes: our (PyTorch's) ε is ε_M·V/(V − 1), so
  // the same loss is ε_M = ε·(V − 1)/V. (Before issue 12 our option was Megatron's ε_M, and this
  // test passed ε to both.)
  const double eps_megatron = eps * double(v - 1) / double(v);
  auto megatron = [&](int p, int rank) {
    const Index vl = v / p, c0 = rank * vl;
    M out(kT, 1);
    for (Index i = 0; i < kT; ++i) {
      const double mx = x.row(i).maxCoeff();
      const double lse = mx + std::log((x.row(i).array() - mx).exp().sum());
      const double nll = lse - x(i, tg[i]);
      const double s = eps_megatron * double(vl) / double(vl - 1);
      const double mean_logp = x.row(i).segment(c0, vl).mean() - lse;
      out(i, 0) = (1 - s) * nll - s * mean_logp;
    }
    return out;
  };
  // At TP=1 Megatron's form with ε_M is ours with ε...
  CHECK(compare(megatron(1, 0), M(r.loss)).within(1e-12));
  for (int p : {2, 4}) {
    CAPTURE(p);
    const M ours = sharded(p);
    const auto e = compare(ours, M(r.loss));
    CHECK(e.within(1e-12));
    CHECK(compare(ours, tp1).within(1e-12));
    // ...at TP>1 it differs from the dense loss on every rank, by far more than rounding.
    for (int rank = 0; rank < p; ++rank) {
      const auto d = compare(megatron(p, rank), M(r.loss));
      CHECK(d.max_abs > 1e-3);
      if (rank == 0) MESSAGE("TP=" << p << ": ours vs dense " << e.max_abs << ", Megatron's local form vs dense " << d.max_abs);
    }
  }
}

// =============================================================================================
// Label smoothing is PyTorch's (issue 12): loss = (1−ε)·NLL + ε·mean over all V classes of −log p
// =============================================================================================
TEST_CASE("label smoothing follows PyTorch's label_smoothing: (1-eps)*NLL + eps*mean_j(-log p_j), and its gradient") {
  // A small dense example: 6 tokens, a vocabulary of 6 (padded to 8 at TP=2 and 4, pad logits
  // 1000), one ignored token. The expected values are PyTorch's definition written out here in
  // plain loops (no shardalg, no Eigen expression), in double.
  constexpr Index t = 6, v = 6, vp = 8;
  const double xs[t][v] = {{0.5, -1.25, 2.0, 0.0, 0.75, -0.5},   {1.5, 1.5, -2.0, 0.25, 3.0, -1.0},
                           {-0.25, 0.0, 0.125, 4.0, -3.5, 2.25}, {2.5, -0.75, 1.0, 1.0, 0.5, 0.0},
                           {0.0, 0.0, 0.0, 0.0, 0.0, 0.0},       {-1.0, 3.25, 0.5, -2.25, 1.75, 0.625}};
  const Ids tg = {2, 4, kIgnore, 0, 5, 1};
  M logits = M::Constant(t, vp, 1000.0);
  for (Index i = 0; i < t; ++i)
    for (Index j = 0; j < v; ++j) logits(i, j) = xs[i][j];

  for (double eps : {0.0, 0.1, 0.25, 0.9}) {
    CAPTURE(eps);
    // PyTorch (reduction='mean', ignore_index): per-token loss, mean over the non-ignored tokens,
    // d mean / d logits = (p − (1−ε)·onehot − ε/V) / count on non-ignored rows.
    double want_loss[t] = {}, want_grad[t][v] = {};
    double want_mean = 0;
    int count = 0;
    for (Index i = 0; i < t; ++i) count += tg[i] != kIgnore;
    for (Index i = 0; i < t; ++i) {
      if (tg[i] == kIgnore) continue;
      double mx = xs[i][0];
      for (Index j = 1; j < v; ++j) mx = std::max(mx, xs[i][j]);
      double z = 0;
      for (Index j = 0; j < v; ++j) z += std::exp(xs[i][j] - mx);
      double logp[v];
      for (Index j = 0; j < v; ++j) logp[j] = xs[i][j] - mx - std::log(z);
      const double nll = -logp[tg[i]];
      double mean_neg_logp = 0;
      for (Index j = 0; j < v; ++j) mean_neg_logp += -logp[j];
      mean_neg_logp /= double(v);
      want_loss[i] = (1.0 - eps) * nll + eps * mean_neg_logp;
      want_mean += want_loss[i] / double(count);
      for (Index j = 0; j < v; ++j)
        want_grad[i][j] = (std::exp(logp[j]) - (j == tg[i] ? 1.0 - eps : 0.0) - eps / double(v)) / double(count);
    }
    for (int p : {1, 2, 4}) {
      CAPTURE(p);
      const M z = p == 1 ? M(logits.leftCols(v)) : logits;
      const auto o = run_ce<double>(p, z, tg, eps, M::Ones(t, 1), v);
      CHECK(o.count == count);
      CHECK(std::abs(o.mean - want_mean) <= 1e-14 * std::abs(want_mean));
      double err = 0, scale = 0, gerr = 0, gscale = 0;
      for (Index i = 0; i < t; ++i) {
        err = std::max(err, std::abs(o.losses(i, 0) - want_loss[i]));
        scale = std::max(scale, std::abs(want_loss[i]));
        for (Index j = 0; j < v; ++j) {
          gerr = std::max(gerr, std::abs(o.dmean(i, j) - want_grad[i][j]));
          gscale = std::max(gscale, std::abs(want_grad[i][j]));
        }
        for (Index j = v; j < o.dmean.cols(); ++j) CHECK(o.dmean(i, j) == 0.0);
      }
      CHECK(err <= 1e-14 * scale);
      CHECK(gerr <= 1e-14 * gscale);
      CHECK(o.losses(2, 0) == 0.0);
      // Megatron's ε_M (target 1 − ε_M, the other V − 1 classes ε_M/(V−1)) is ε_M = ε·(V−1)/V.
      for (Index i = 0; i < t; ++i) {
        if (tg[i] == kIgnore) continue;
        const double em = eps * double(v - 1) / double(v);
        double mx = xs[i][0];
        for (Index j = 1; j < v; ++j) mx = std::max(mx, xs[i][j]);
        double z = 0;
        for (Index j = 0; j < v; ++j) z += std::exp(xs[i][j] - mx);
        double megatron = 0;
        for (Index j = 0; j < v; ++j)
          megatron -= (j == tg[i] ? 1.0 - em : em / double(v - 1)) * (xs[i][j] - mx - std::log(z));
        CHECK(std::abs(o.losses(i, 0) - megatron) <= 1e-14 * std::abs(megatron));
      }
    }
  }
}

// =============================================================================================
// The embedding, the tied head and the whole tied chain
// =============================================================================================

namespace {
template <class T>
TiedOut run_tied(int p, const M& master, const Ids& ids, const Ids& tg, double eps, const M& dy) {
  return testing::per_rank<TiedOut>(p, [&](const Group& g) { return tied_case<T>(g, master, ids, tg, eps, dy); })[0];
}
}  // namespace

TEST_CASE_TEMPLATE("vocab-parallel embedding, tied head and loss equal the dense tied model", T, float, double) {
  const M master = rounded<T>(testing::random_real<double>(kVocab, kH, 41).cast<double>());
  const M dy = rounded<T>(testing::random_real<double>(kT, kH, 42).cast<double>());
  const Ids ids = make_ids(43), tg = make_targets(44, true);
  for (int p : kWorlds) {
    for (double eps : {0.0, 0.1}) {
      CAPTURE(p);
      CAPTURE(eps);
      check_tied<T>(run_tied<T>(p, master, ids, tg, eps, dy), p, master, ids, tg, eps, dy);
    }
  }
}

TEST_CASE_TEMPLATE("embedding init is tensor-parallel invariant: real rows bit for bit, pad rows zero", T, float, double) {
  const nn::NormalInit init{0xC0FFEE, 0.02};
  const auto tensor = nn::tensor_id(0, nn::word_embedding_kind);
  Mat<T> want(kVocab, kH);
  for (Index i = 0; i < kVocab; ++i)
    for (Index j = 0; j < kH; ++j) want(i, j) = static_cast<T>(0.02 * nn::normal_at(0xC0FFEE, tensor, i, j));
  for (int p : kWorlds) {
    CAPTURE(p);
    const auto e = testing::per_rank<Mat<T>>(p, [&](const Group& g) {
      return to_dense(nn::VocabParallelEmbedding<T>::init(kVocab, kH, g, init, tensor, kDivisor).weight());
    })[0];
    REQUIRE(e.rows() == nn::padded_vocab(kVocab, kDivisor, p));
    CHECK(e.topRows(kVocab) == want);
    CHECK(e.bottomRows(e.rows() - kVocab).cwiseAbs().maxCoeff() == T(0));
  }
}

// =============================================================================================
// The ledger: b·s values, never b·s·v
// =============================================================================================

TEST_CASE("ledger: embedding 1 all_reduce of T·h forward, none backward; loss all_reduce(max) of T + all_reduce(sum) of 2·T (3·T smoothed), none backward") {
  for (int p : {2, 3, 4}) {
    for (double eps : {0.0, 0.1}) {
      CAPTURE(p);
      CAPTURE(eps);
      const auto all = testing::per_rank<Entries>(p, [&](const Group& g) { return ledger_run(g, eps); });
      for (const auto& s : all) check_ledger(s, eps);
    }
  }
}

// =============================================================================================
// Bad input
// =============================================================================================
TEST_CASE("bad input: typed errors with exact text") {
  auto on = [](int p, auto fn) { run_ranks(p, [&](ThreadComm& c) { fn(Group(c)); }); };
  auto filler = [](Index, Index) { return 0.5; };
  // Padding: Megatron's GPT-2 vocabulary at TP=8, and the checks on an explicit padded size.
  CHECK(nn::padded_vocab(50257, 128, 8) == 51200);
  CHECK(nn::padded_vocab(50257, 128, 1) == 50304);
  CHECK(nn::padded_vocab(128, 128, 1) == 128);
  // Any padded size splits (balanced blocks): 130 rows on 4 ranks are 33, 33, 32, 32.
  on(4, [&](const Group& g) {
    const auto e = nn::VocabParallelEmbedding<double>::make_padded(128, 130, 8, g, filler);
    CHECK(e.vocab_start() == std::vector<Index>{0, 33, 66, 98}[static_cast<std::size_t>(g.rank())]);
    CHECK(e.vocab_end() - e.vocab_start() == (g.rank() < 2 ? 33 : 32));
  });
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) { nn::VocabParallelEmbedding<double>::make_padded(128, 120, 8, g, filler); }),
                       "VocabParallelEmbedding: padded vocabulary 120 is smaller than vocabulary 128", ShapeError);
  CHECK_THROWS_WITH_AS(nn::padded_vocab(0, 128, 2), "vocabulary size 0 must be at least 1", ShapeError);
  CHECK(nn::padded_vocab(50257, 0, 3) == 50257);  // divisor 0: no padding
  CHECK_THROWS_WITH_AS(nn::padded_vocab(100, -1, 2), "vocabulary divisor -1 must be 0 (no padding) or at least 1", ShapeError);
  // Token ids and targets out of range.
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const auto e = nn::VocabParallelEmbedding<double>::make(128, 8, g, filler);
                         (void)e.forward(Ids{1, 130, 2, 3});
                       }),
                       "VocabParallelEmbedding: token id 130 is out of range for vocabulary 128", IndexError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const auto e = nn::VocabParallelEmbedding<double>::make(100, 8, g, filler);
                         (void)e.forward(Ids{1, 100});  // a pad row is not a token
                       }),
                       "VocabParallelEmbedding: token id 100 is out of range for vocabulary 100", IndexError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const auto e = nn::VocabParallelEmbedding<double>::make(128, 8, g, filler);
                         (void)e.forward(Ids{-1, 2});
                       }),
                       "VocabParallelEmbedding: token id -1 is out of range for vocabulary 128", IndexError);
  // Six tokens on 4 ranks under sequence parallelism: blocks of 2, 2, 1, 1.
  on(4, [&](const Group& g) {
    const auto e = nn::VocabParallelEmbedding<double>::make(128, 8, g, filler);
    CHECK(e.forward_sp(Ids{1, 2, 3, 4, 5, 6}).y.local_rows() == (g.rank() < 2 ? 2 : 1));
  });
  auto logits = [](const Group& g, Index t, Index v) { return shard<ColSharded>(testing::random_real<double>(t, v, 1), g); };
  CHECK_THROWS_WITH_AS(on(4, [&](const Group& g) {
                         const nn::VocabParallelCrossEntropy<double> ce(128);
                         (void)ce.forward(logits(g, 4, 128), Ids{0, 5, 130, 7});
                       }),
                       "VocabParallelCrossEntropy: target 130 is out of range for vocabulary 128", IndexError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const nn::VocabParallelCrossEntropy<double> ce(100);
                         (void)ce.forward(logits(g, 2, 128), Ids{0, 110});  // a pad column is never a target
                       }),
                       "VocabParallelCrossEntropy: target 110 is out of range for vocabulary 100", IndexError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const nn::VocabParallelCrossEntropy<double> ce(128);
                         (void)ce.forward(logits(g, 4, 128), Ids{0, 1, 2});
                       }),
                       "VocabParallelCrossEntropy: 3 targets for 4 logit rows", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const nn::VocabParallelCrossEntropy<double> ce(130);
                         (void)ce.forward(logits(g, 2, 128), Ids{0, 1});
                       }),
                       "VocabParallelCrossEntropy: logits have 128 columns, fewer than vocabulary 130", ShapeError);
  CHECK_THROWS_WITH_AS((nn::VocabParallelCrossEntropy<double>(128, {-100, 1.0})),
                       "VocabParallelCrossEntropy: label smoothing 1 is not in [0, 1)", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         const auto e = nn::VocabParallelEmbedding<double>::make(128, 8, g, filler);
                         (void)e.logits(shard<Replicated>(testing::random_real<double>(4, 6, 1), g));
                       }),
                       "VocabParallelEmbedding: head input has 6 columns, expected 8", ShapeError);
}

TEST_CASE("z: largest relative error observed against the dense references") {
  MESSAGE("float: " << worst(false).rel << " (" << worst(false).what << ")");
  MESSAGE("double: " << worst(true).rel << " (" << worst(true).what << ")");
  CHECK(worst(true).rel <= 1e-12);
  CHECK(worst(false).rel <= 1e-5);
}
