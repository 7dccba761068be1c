// tests/gpt/vocab_cases.hpp — shared by the thread and MPI tests of the vocabulary-parallel
// embedding and loss: the dense twins (plain Eigen, double, column-major; no shardalg code), the
// fixtures, the tied-chain case and its checks, and the ledger run and its exact expectations.
#pragma once

#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "testing.hpp"

using namespace shardalg;
using Ids = std::vector<std::int64_t>;

// =============================================================================================
// Dense twins (no shardalg code).
// =============================================================================================
namespace ref {
using M = Eigen::MatrixXd;
using V = Eigen::VectorXd;

/// Softmax cross-entropy over all columns of x, written from the target distribution with
/// PyTorch's label smoothing: q = (1 − ε)·onehot + ε/V (the target 1 − ε + ε/V, every other
/// class ε/V); loss_t = −Σ_j q_j log p_j.
/// Ignored tokens: loss 0, gradient 0; mean over the others.
struct Ce {
  V loss;
  double mean = 0;
  M dloss;  // [T, V]: row t = d loss_t / d x_t = p_t − q_t (0 for ignored tokens)
  M dmean;  // d mean / d x
  int count = 0;
};
inline Ce cross_entropy(const M& x, const Ids& tg, std::int64_t ignore, double eps) {
  const Eigen::Index t = x.rows(), nv = x.cols();
  Ce r{V::Zero(t), 0.0, M::Zero(t, nv), M::Zero(t, nv), 0};
  for (Eigen::Index i = 0; i < t; ++i) {
    if (tg[i] == ignore) continue;
    ++r.count;
    const double mx = x.row(i).maxCoeff();
    double z = 0;
    for (Eigen::Index j = 0; j < nv; ++j) z += std::exp(x(i, j) - mx);
    double l = 0;
    for (Eigen::Index j = 0; j < nv; ++j) {
      const double q = (j == tg[i] ? 1.0 - eps : 0.0) + eps / double(nv);
      const double logp = x(i, j) - mx - std::log(z);
      l -= q * logp;
      r.dloss(i, j) = std::exp(logp) - q;
    }
    r.loss(i) = l;
  }
  if (r.count > 0) {
    r.mean = r.loss.sum() / r.count;
    r.dmean = r.dloss / r.count;
  }
  return r;
}

/// The tied model without blocks: Y = E[ids]; logits = Y · Eᵀ; mean cross-entropy.
struct Tied {
  M y, logits;
  Ce ce;
  M de;  // d mean / d E (lookup part + head part)
};
inline M lookup(const M& e, const Ids& ids) {
  M y(ids.size(), e.cols());
  for (std::size_t t = 0; t < ids.size(); ++t) y.row(t) = e.row(ids[t]);
  return y;
}
inline M lookup_grad(Eigen::Index rows, const M& dy, const Ids& ids) {
  M de = M::Zero(rows, dy.cols());
  for (std::size_t t = 0; t < ids.size(); ++t) de.row(ids[t]) += dy.row(t);
  return de;
}
inline Tied tied(const M& e, const Ids& ids, const Ids& tg, std::int64_t ignore, double eps) {
  Tied r;
  r.y = lookup(e, ids);
  r.logits = r.y * e.transpose();
  r.ce = cross_entropy(r.logits, tg, ignore, eps);
  const M& dz = r.ce.dmean;
  const M dy = dz * e;                           // through the head into Y
  r.de = dz.transpose() * r.y + lookup_grad(e.rows(), dy, ids);  // head part + lookup part
  return r;
}

/// Max over entries of |fd − analytic| for f at every entry of x, central differences.
template <class F>
double fd_error(F f, M x, const M& grad, double h) {
  double worst = 0;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      const double x0 = x(i, j);
      x(i, j) = x0 + h;
      const double fp = f(x);
      x(i, j) = x0 - h;
      const double fm = f(x);
      x(i, j) = x0;
      worst = std::max(worst, std::abs((fp - fm) / (2 * h) - grad(i, j)));
    }
  return worst;
}
}  // namespace ref

// =============================================================================================
// Fixtures
// =============================================================================================
namespace {
using ref::M;
template <class T>
using Mat = CpuBackend::matrix<T>;

constexpr Index kT = 12;       // tokens (b·s), divisible by 1, 2, 3, 4
constexpr Index kH = 8;        // hidden
constexpr Index kVocab = 50;   // real vocabulary
constexpr Index kDivisor = 4;  // pad to a multiple of 4·P: 52, 56, 60, 64 at P = 1..4
constexpr std::int64_t kIgnore = -100;
const std::vector<int> kWorlds = {1, 2, 3, 4};

template <class T>
constexpr double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;

/// Token ids covering both ends of the vocabulary.
Ids make_ids(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> d(0, kVocab - 1);
  Ids ids(kT);
  for (auto& i : ids) i = d(gen);
  ids[0] = 0;
  ids[1] = kVocab - 1;
  ids[5] = ids[2];  // a repeated token: its rows of dE accumulate
  return ids;
}
/// Targets with the last vocabulary entry, and two ignored tokens when asked.
Ids make_targets(std::uint64_t seed, bool with_ignored) {
  Ids t = make_ids(seed);
  t[3] = kVocab - 1;
  if (with_ignored) t[4] = t[9] = kIgnore;
  return t;
}
/// A dense matrix rounded to T and back (so the reference sees exactly the sharded inputs).
template <class T>
M rounded(const M& m) {
  return m.cast<T>().template cast<double>();
}
template <class T>
Mat<T> row_major(const M& m) {
  return m.cast<T>();
}

struct Worst {
  double rel = 0;
  std::string what;
};
Worst& worst(bool dbl) {
  static Worst w[2];
  return w[dbl ? 1 : 0];
}
template <class T>
void check_rel(const ErrorReport& e, const std::string& what) {
  CHECK_MESSAGE(e.within(tol<T>), what << ": " << e);
  auto& w = worst(std::is_same_v<T, double>);
  if (e.max_rel >= w.rel) w = {e.max_rel, what};
}

/// Everything the sharded loss produces, gathered to dense on each rank.
struct CeOut {
  M losses, dmean, dlosses;  // dlosses: backward with an upstream per-token gradient
  double mean = 0;
  Index count = 0;
  bool replicas = false;
};

template <class T>
CeOut run_ce(int p, const M& logits_padded, const Ids& tg, double eps, const M& upstream, Index vocab = kVocab) {
  const auto out = testing::per_rank<CeOut>(p, [&](const Group& g) {
    auto z = shard<ColSharded>(row_major<T>(logits_padded), g);
    const nn::VocabParallelCrossEntropy<T> ce(vocab, {kIgnore, eps});
    auto f = ce.forward(z, tg);
    CeOut o;
    o.losses = to_dense(f.losses).template cast<double>();
    o.mean = static_cast<double>(f.mean);
    o.count = f.count;
    o.dmean = to_dense(ce.backward_mean(f.cache)).template cast<double>();
    auto up = shard<Replicated>(row_major<T>(upstream), g);
    o.dlosses = to_dense(ce.backward(f.cache, up)).template cast<double>();
    o.replicas = replicas_agree(f.losses);
    return o;
  });
  for (int r = 1; r < p; ++r) {
    CHECK(out[r].losses == out[0].losses);
    CHECK(out[r].mean == out[0].mean);
  }
  CHECK(out[0].replicas);
  return out[0];
}

/// Logits [T, v_padded]: real columns from `real`, pad columns 1000 (a pad column that leaked into
/// the softmax would dominate it).
[[maybe_unused]] M pad_logits(const M& real, Index padded) {
  M z = M::Constant(real.rows(), padded, 1000.0);
  z.leftCols(real.cols()) = real;
  return z;
}

}  // namespace

namespace {
struct TiedOut {
  M y, y_sp, logits, logits_sp, losses, de_lookup, de_lookup_sp, de_head, dx_head, dx_head_sp, de_total, e;
  double mean = 0;
};

template <class T>
TiedOut tied_case(const Group& g, const M& master, const Ids& ids, const Ids& tg, double eps, const M& dy) {
  {
    TiedOut o;
    const auto emb = nn::VocabParallelEmbedding<T>::from_dense(row_major<T>(master), g, kDivisor);
    o.e = to_dense(emb.weight()).template cast<double>();
    // Lookup, both layouts, and the backward of each with the same dY.
    auto f = emb.forward(ids);
    o.y = to_dense(f.y).template cast<double>();
    auto fs = emb.forward_sp(ids);
    o.y_sp = to_dense(fs.y).template cast<double>();
    const auto dyr = shard<Replicated>(row_major<T>(dy), g);
    o.de_lookup = to_dense(emb.backward(f.cache, dyr).de).template cast<double>();
    o.de_lookup_sp = to_dense(emb.backward_sp(fs.cache, shard<RowSharded>(row_major<T>(dy), g)).de).template cast<double>();
    // The tied chain: Y[R] → logits[C] → loss → dlogits[C] → dY, dE.
    auto h = emb.logits(f.y);
    o.logits = to_dense(h.logits).template cast<double>();
    const nn::VocabParallelCrossEntropy<T> ce(kVocab, {kIgnore, eps});
    auto l = ce.forward(h.logits, tg);
    o.losses = to_dense(l.losses).template cast<double>();
    o.mean = static_cast<double>(l.mean);
    auto dz = ce.backward_mean(l.cache);
    auto hg = emb.logits_backward(h.cache, dz);
    o.dx_head = to_dense(hg.dx).template cast<double>();
    o.de_head = to_dense(hg.params.de).template cast<double>();
    auto lg = emb.backward(f.cache, hg.dx);
    o.de_total = to_dense(hg.params.de + lg.de).template cast<double>();
    // The same under sequence parallelism: Y[Row] → all_gather → logits; dX → reduce_scatter.
    auto hs = emb.logits_sp(fs.y);
    o.logits_sp = to_dense(hs.logits).template cast<double>();
    auto hgs = emb.logits_backward_sp(hs.cache, ce.backward_mean(ce.forward(hs.logits, tg).cache));
    o.dx_head_sp = to_dense(hgs.dx).template cast<double>();
    return o;
  }
}

/// Every output and gradient of the tied chain against the dense twin.
template <class T>
void check_tied(const TiedOut& o, int p, const M& master, const Ids& ids, const Ids& tg, double eps, const M& dy) {
  const Index vp = nn::padded_vocab(kVocab, kDivisor, p);
  const auto r = ref::tied(master, ids, tg, kIgnore, eps);
  const std::string tag = "tied p=" + std::to_string(p) + " eps=" + std::to_string(eps);
  REQUIRE(o.e.rows() == vp);
  CHECK(o.e.topRows(kVocab) == master);                              // sharded from the master exactly
  CHECK(o.e.bottomRows(vp - kVocab).cwiseAbs().maxCoeff() == 0.0);  // pad rows are zero
  check_rel<T>(compare(o.y, r.y), tag + " Y");
  check_rel<T>(compare(o.y_sp, r.y), tag + " Y (SP)");
  // Lookup backward with a given dY: dE = scatter-add, pad rows untouched.
  const M de_lookup = ref::lookup_grad(kVocab, dy, ids);
  check_rel<T>(compare(M(o.de_lookup.topRows(kVocab)), de_lookup), tag + " dE lookup");
  check_rel<T>(compare(M(o.de_lookup_sp.topRows(kVocab)), de_lookup), tag + " dE lookup (SP)");
  CHECK(o.de_lookup.bottomRows(vp - kVocab).cwiseAbs().maxCoeff() == 0.0);
  // Head and loss.
  check_rel<T>(compare(M(o.logits.leftCols(kVocab)), r.logits), tag + " logits");
  check_rel<T>(compare(M(o.logits_sp.leftCols(kVocab)), r.logits), tag + " logits (SP)");
  check_rel<T>(compare(o.losses, M(r.ce.loss)), tag + " losses");
  check_rel<T>(compare(M::Constant(1, 1, o.mean), M::Constant(1, 1, r.ce.mean)), tag + " mean");
  const M dx = r.ce.dmean * master;
  check_rel<T>(compare(o.dx_head, dx), tag + " dX head");
  check_rel<T>(compare(o.dx_head_sp, dx), tag + " dX head (SP)");
  check_rel<T>(compare(M(o.de_head.topRows(kVocab)), M(r.ce.dmean.transpose() * r.y)), tag + " dE head");
  // The tied weight's whole gradient, against the finite-difference-checked chain.
  check_rel<T>(compare(M(o.de_total.topRows(kVocab)), r.de), tag + " dE tied");
  CHECK(o.de_total.bottomRows(vp - kVocab).cwiseAbs().maxCoeff() == 0.0);
}
}  // namespace

namespace {
struct Entry {
  CollectiveKind kind;
  std::size_t elements;
  std::string in, out;
  bool operator==(const Entry&) const = default;
};
using Entries = std::map<std::string, std::vector<Entry>>;

Entries ledger_run(const Group& comm, double eps) {
  Ledger ledger;
  Group g = ledgered(comm, ledger);
  const M master = testing::random_real<double>(kVocab, kH, 51).cast<double>();
  const Ids ids = make_ids(52), tg = make_targets(53, true);
  const auto emb = nn::VocabParallelEmbedding<double>::from_dense(master, g, kDivisor);
  const nn::VocabParallelCrossEntropy<double> ce(kVocab, {kIgnore, eps});
  nn::VocabParallelEmbedding<double>::Forward f;
  nn::VocabParallelEmbedding<double>::HeadForward h;
  nn::VocabParallelCrossEntropy<double>::Forward l;
  Sharded<double, ColSharded> dz;
  nn::VocabParallelEmbedding<double>::HeadGrads hg;
  { auto s = ledger.scope("emb.fwd"); f = emb.forward(ids); }
  { auto s = ledger.scope("head.fwd"); h = emb.logits(f.y); }
  { auto s = ledger.scope("ce.fwd"); l = ce.forward(h.logits, tg); }
  { auto s = ledger.scope("ce.bwd"); dz = ce.backward_mean(l.cache); }
  { auto s = ledger.scope("head.bwd"); hg = emb.logits_backward(h.cache, dz); }
  { auto s = ledger.scope("emb.bwd"); (void)emb.backward(f.cache, hg.dx); }
  // Sequence parallel.
  nn::VocabParallelEmbedding<double>::ForwardSP fs;
  { auto s = ledger.scope("sp.emb.fwd"); fs = emb.forward_sp(ids); }
  { auto s = ledger.scope("sp.head.fwd"); h = emb.logits_sp(fs.y); }
  l = ce.forward(h.logits, tg);
  nn::VocabParallelEmbedding<double>::HeadGradsSP hgs;
  { auto s = ledger.scope("sp.head.bwd"); hgs = emb.logits_backward_sp(h.cache, ce.backward_mean(l.cache)); }
  { auto s = ledger.scope("sp.emb.bwd"); (void)emb.backward_sp(fs.cache, hgs.dx); }
  Entries out;
  for (const auto& e : ledger.entries()) out[e.scope].push_back({e.kind, e.elements, e.layout_in, e.layout_out});
  return out;
}

/// The exact ledger of ledger_run on one rank.
inline void check_ledger(const Entries& s, double eps) {
  using CK = CollectiveKind;
  const std::size_t th = kT * kH, t = kT;
  const std::size_t k = eps > 0 ? 3 : 2;
  using V = std::vector<Entry>;
  CHECK(s.at("emb.fwd") == V{{CK::all_reduce, th, "Partial", "R"}});
  CHECK(s.count("emb.bwd") == 0);
  CHECK(s.count("head.fwd") == 0);
  CHECK(s.at("head.bwd") == V{{CK::all_reduce, th, "Partial", "R"}});  // f's adjoint
  CHECK(s.at("ce.fwd") == V{{CK::all_reduce, t, "Partial(max)", "R"}, {CK::all_reduce, k * t, "Partial", "R"}});
  CHECK(s.count("ce.bwd") == 0);
  CHECK(s.at("sp.emb.fwd") == V{{CK::reduce_scatter, th, "Partial", "Row"}});
  CHECK(s.at("sp.emb.bwd") == V{{CK::all_gather, th, "Row", "R"}});  // reduce_scatter's adjoint
  CHECK(s.at("sp.head.fwd") == V{{CK::all_gather, th, "Row", "R"}});
  CHECK(s.at("sp.head.bwd") == V{{CK::reduce_scatter, th, "Partial", "Row"}});
  // Nothing the size of the logits, b·s·v, ever moves.
  for (const auto& [scope, es] : s)
    for (const auto& e : es) CHECK(e.elements < static_cast<std::size_t>(kT * kVocab));
}
}  // namespace
