// tests/gpt/test_sp_optim.cpp — the optimizers on sharded parameters: Adam's and SGD's state sharded
// like the parameter and their updates equal to a dense Adam written here at every TP size; the
// global norm counts replicated gradients and grouped-query K/V copies once. (Apart from
// test_sp_block.cpp: one TU held both and took 1.31 GB of compiler memory.)
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../layers/cases.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/nn/optim/optim.hpp"

using namespace lt;

namespace {
/// A dense Adam, written here from the paper's equations (Kingma & Ba, Algorithm 1, with
/// decoupled weight decay).
struct DenseAdam {
  double lr, b1, b2, eps, wd;
  M m, v;
  int t = 0;
  void step(M& p, const M& g, bool decay) {
    if (m.size() == 0) {
      m = M::Zero(p.rows(), p.cols());
      v = M::Zero(p.rows(), p.cols());
    }
    ++t;
    for (Index i = 0; i < p.rows(); ++i)
      for (Index j = 0; j < p.cols(); ++j) {
        m(i, j) = b1 * m(i, j) + (1 - b1) * g(i, j);
        v(i, j) = b2 * v(i, j) + (1 - b2) * g(i, j) * g(i, j);
        const double mh = m(i, j) / (1 - std::pow(b1, t)), vh = v(i, j) / (1 - std::pow(b2, t));
        p(i, j) -= lr * (mh / (std::sqrt(vh) + eps) + (decay ? wd * p(i, j) : 0.0));
      }
  }
};
}  // namespace

TEST_CASE("Adam and SGD: state sharded like the parameter, updates equal the dense optimizer at every TP size") {
  const M w0 = rnd<double>(8, 12, 201), b0 = rnd<double>(1, 12, 202);
  std::vector<M> gw, gb;
  for (int s = 0; s < 3; ++s) {
    gw.push_back(rnd<double>(8, 12, 210 + s));
    gb.push_back(rnd<double>(1, 12, 220 + s));
  }
  // Dense reference: 3 steps, gradients clipped by the global norm over both tensors.
  const double max_norm = 2.0;
  DenseAdam aw{0.05, 0.9, 0.99, 1e-8, 0.1, M(), M(), 0}, ab{0.05, 0.9, 0.99, 1e-8, 0.1, M(), M(), 0};
  M w = w0, b = b0;
  std::vector<double> norms;
  for (int s = 0; s < 3; ++s) {
    const double n = std::sqrt(gw[s].squaredNorm() + gb[s].squaredNorm());
    norms.push_back(n);
    const double c = n > max_norm ? max_norm / (n + 1e-6) : 1.0;
    aw.step(w, M(c * gw[s]), true);
    ab.step(b, M(c * gb[s]), false);
  }
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    struct Out {
      M w, b;
      std::vector<double> norms;
      Index state_rows = 0, state_cols = 0, state_b = 0;
      std::size_t ledger_reduces = 0, ledger_elements = 0;
    };
    const auto out = testing::per_rank<Out>(p, [&](const Group& comm) {
      Ledger ledger;
      const Group g = ledgered(comm, ledger);
      nn::Adam<double> adam({0.05, 0.9, 0.99, 1e-8, 0.1});
      auto W = shard<ColSharded>(testing::Mat<double>(w0), g);  // a ColSharded weight (12 / p columns)
      auto Bv = shard<Replicated>(testing::Mat<double>(b0), g);  // a replicated bias
      const nn::ParamInfo iw{"w", true, {}}, ib{"b", false, {}};
      Out o;
      for (int s = 0; s < 3; ++s) {
        const auto GW = shard<ColSharded>(testing::Mat<double>(gw[s]), g);
        const auto GB = shard<Replicated>(testing::Mat<double>(gb[s]), g);
        nn::GradNorm gn;
        gn.add(iw, GW);
        gn.add(ib, GB);
        const double n = gn.finish();
        o.norms.push_back(n);
        adam.begin_step();
        adam.update(iw, W, GW, nn::clip_factor(n, max_norm));
        adam.update(ib, Bv, GB, nn::clip_factor(n, max_norm));
      }
      o.w = to_dense(W);
      o.b = to_dense(Bv);
      o.state_rows = adam.state().at("w").m.rows();
      o.state_cols = adam.state().at("w").m.cols();
      o.state_b = adam.state().at("b").v.cols();
      o.ledger_reduces = ledger.count(CollectiveKind::all_reduce, "grad_norm");
      for (const auto& e : ledger.entries()) o.ledger_elements += e.elements;
      return o;
    });
    for (const auto& o : out) {
      for (int s = 0; s < 3; ++s) CHECK(std::abs(o.norms[s] - norms[s]) <= 1e-14 * norms[s]);
      CHECK(compare(o.w, w).within(1e-14));
      CHECK(compare(o.b, b).within(1e-14));
      CHECK(o.state_rows == 8);
      CHECK(o.state_cols == 12 / p);  // the moments of a C weight are C
      CHECK(o.state_b == 12);         // of an R bias, R
      CHECK(o.ledger_reduces == (p > 1 ? 3u : 0u));  // one scalar all-reduce per step
      CHECK(o.ledger_elements == (p > 1 ? 3u : 0u));
    }
  }
  // Clipping changed something in this test (it is not vacuous).
  CHECK(norms[0] > max_norm);
}

TEST_CASE("global norm: replicated gradients counted once, grouped-query K/V copies once") {
  const M gq = rnd<double>(4, 8, 301);
  const double want = gq.squaredNorm();
  for (int p : {2, 4}) {
    const auto out = testing::per_rank<double>(p, [&](const Group& g) {
      nn::GradNorm gn;
      gn.add(nn::ParamInfo{"r", false, {}}, shard<Replicated>(testing::Mat<double>(gq), g));
      return gn.finish();
    });
    for (double n : out) CHECK(n * n == doctest::Approx(want).epsilon(1e-14));
    // A C tensor whose second column of every block is one column copied on every rank (like
    // grouped-query K/V heads replicated over p/groups ranks): weight 1/p on the copies.
    double want2 = gq.col(7).squaredNorm();
    for (int r = 0; r < p; ++r) want2 += gq.col(r).squaredNorm();
    const auto out2 = testing::per_rank<double>(p, [&](const Group& g) {
      testing::Mat<double> local(4, 2);
      local.col(0) = gq.col(g.rank());
      local.col(1) = gq.col(7);
      const Sharded<double, ColSharded> t(local, 4, 2 * p, g);
      nn::GradNorm gn;
      gn.add(nn::ParamInfo{"kv", false, [p](Index c) { return c % 2 == 1 ? 1.0 / p : 1.0; }}, t);
      return gn.finish();
    });
    for (double n : out2) CHECK(n * n == doctest::Approx(want2).epsilon(1e-14));
  }
}
