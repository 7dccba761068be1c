// tests/moe/moe_cases.hpp — the MoE layer (nn/layers/moe.hpp) run on an ep × etp mesh of a world and
// compared with its dense twin (reference/moe.hpp); the ledger's collectives beside the count
// derived from the dense twin's routing. Shared by the thread tests and the MPI test.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardalg/nn/layers/moe.hpp"
#include "shardalg/reference/moe.hpp"
#include "shardalg/shardalg.hpp"
#include "testing.hpp"

namespace mc {

using namespace shardalg;
using ref::M;

struct Check {
  std::string name;
  ErrorReport err;
};

/// One MoE configuration. Shapes: T tokens (divisible by 4), hidden h, E experts (divisible by 4),
/// ffn f (divisible by 2).
struct Case {
  std::string name;
  Index k = 2;
  nn::Activation act = nn::Activation::gelu_tanh;
  std::optional<double> cf;  // capacity factor
  bool renormalize = true;
  double aux = 0.01;
  bool bias = true;
  Index tokens = 16, hidden = 8, experts = 4, ffn = 8;
  Index idle = 0;  // the last `idle` experts are never chosen (their logit is expert 0's minus ≥ 20)
};

inline Case named(std::string n) {
  Case c;
  c.name = std::move(n);
  return c;
}

inline std::vector<Case> cases() {
  Case a = named("k2.gelu.dropless.aux");
  Case b = named("k1.swiglu.cf1.aux");
  b.k = 1, b.act = nn::Activation::swiglu, b.cf = 1.0, b.aux = 0.02;
  Case c = named("k2.swiglu.cf0.75.nobias");
  c.act = nn::Activation::swiglu, c.cf = 0.75, c.bias = false;
  Case d = named("k1.gelu_erf.raw_weights");  // Switch's k = 1: w = p (not renormalised)
  d.k = 1, d.act = nn::Activation::gelu_erf, d.renormalize = false, d.aux = 0.05;
  Case e = named("k1.gelu.raw_weights.two_idle_experts");  // experts 2, 3 get no token: ranks receive nothing at EP 2, 4
  e.k = 1, e.renormalize = false, e.idle = 2;
  return {a, b, c, d, e};
}

inline nn::MoeConfig config(const Case& c) {
  nn::MoeConfig m;
  m.hidden = c.hidden;
  m.experts = c.experts;
  m.top_k = c.k;
  m.ffn = c.ffn;
  m.act = c.act;
  m.bias = c.bias;
  m.capacity_factor = c.cf;
  m.renormalize = c.renormalize;
  m.aux_loss_coeff = c.aux;
  return m;
}

inline ref::Act to_ref(nn::Activation a) {
  return a == nn::Activation::gelu_tanh ? ref::Act::gelu_tanh : a == nn::Activation::gelu_erf ? ref::Act::gelu_erf : ref::Act::swiglu;
}

/// The dense twin with random weights (seeded), rounded to T.
template <class T>
ref::Moe make_ref(const Case& c, std::uint64_t seed) {
  auto rnd = [&](Index r, Index k, double scale, std::uint64_t s) {
    const M m = testing::random_real<double>(r, k, seed * 1000 + s) * scale;
    return M(m.unaryExpr([](double v) { return static_cast<double>(static_cast<T>(v)); }));
  };
  auto bias = [&](Index k, std::uint64_t s) { return c.bias ? rnd(1, k, 0.3, s) : M(M::Zero(1, k)); };
  ref::Moe m;
  m.router = rnd(c.hidden, c.experts, 1.5, 1);
  for (Index e = c.experts - c.idle; e < c.experts; ++e) {
    m.router.col(e) = m.router.col(0);
    m.router(c.hidden - 1, e) -= 20.0;
  }
  for (Index e = 0; e < c.experts; ++e) {
    const std::uint64_t s = 10 * (e + 1);
    m.experts.push_back(ref::Mlp{rnd(c.hidden, c.ffn, 0.5, s + 1), bias(c.ffn, s + 2), rnd(c.hidden, c.ffn, 0.5, s + 3),
                                 bias(c.ffn, s + 4), rnd(c.ffn, c.hidden, 0.4, s + 5), bias(c.hidden, s + 6),
                                 to_ref(c.act)});
  }
  m.k = c.k;
  m.renormalize = c.renormalize;
  m.capacity_factor = c.cf;
  m.aux_coeff = c.aux;
  return m;
}

inline nn::MoeMasters<M> masters_of(const Case& c, const ref::Moe& m) {
  const bool glu = c.act == nn::Activation::swiglu;
  nn::MoeMasters<M> out{&m.router, {}};
  for (const auto& e : m.experts)
    out.experts.push_back({&e.w1, c.bias ? &e.b1 : nullptr, glu ? &e.wu : nullptr, glu && c.bias ? &e.bu : nullptr, &e.w2,
                           c.bias ? &e.b2 : nullptr});
  return out;
}

/// The input tokens (rounded to T); with idle experts the last feature is at least 1.
template <class T>
M make_x(const Case& c, std::uint64_t seed) {
  M x = testing::random_real<double>(c.tokens, c.hidden, seed + 101);
  if (c.idle > 0) x.col(c.hidden - 1).array() = x.col(c.hidden - 1).array().abs() + 1.0;
  return x.unaryExpr([](double v) { return static_cast<double>(static_cast<T>(v)); });
}

/// What one rank's run reports: the checks, the aux loss, and its ledger entries.
struct RankResult {
  std::vector<Check> checks;
  double aux = 0;
  std::vector<LedgerEntry> ledger;
  int ep_rank = 0, etp_rank = 0;
};

/// The layer on the mesh ep × etp of `world`, against the dense twin: y, aux, dx, dWr (reduced) and
/// every local expert's gradients, in their physical layouts (SwiGLU's interleaved fc1 on etp).
template <class T>
RankResult run_case(const Group& world, int ep_size, int etp_size, const Case& c, std::uint64_t seed = 7) {
  RankResult out;
  Ledger ledger;
  const Group lw = ledgered(world, ledger);
  Mesh mesh(lw, {{"ep", ep_size}, {"etp", etp_size}});
  out.ep_rank = mesh.coord("ep");
  out.etp_rank = mesh.coord("etp");
  const auto rm = make_ref<T>(c, seed);
  const M x = make_x<T>(c, seed);
  const M dy = testing::random_real<double>(c.tokens, c.hidden, seed + 102);
  const double daux = 1.0;
  const auto layer = nn::Moe<T>::from_dense(config(c), masters_of(c, rm), mesh);
  using Tokens = typename nn::Moe<T>::Tokens;
  const auto X = shard<typename Tokens::axes>(testing::Mat<T>(x.cast<T>()), mesh);
  const auto dY = shard<typename Tokens::axes>(testing::Mat<T>(dy.cast<T>()), mesh);
  ledger.clear();  // the mesh's splits are not the layer's traffic
  std::optional<typename nn::Moe<T>::Forward> f;
  {
    auto s = ledger.scope("fwd");
    f.emplace(layer.forward(X));
  }
  std::optional<typename nn::Moe<T>::Grads> g;
  {
    auto s = ledger.scope("bwd");
    g.emplace(layer.backward(f->cache, dY, static_cast<T>(daux)));
  }
  std::optional<typename nn::Moe<T>::ReducedGrads> rg;
  {
    auto s = ledger.scope("step");
    rg.emplace(layer.reduce_grads(std::move(g->params)));
  }
  out.ledger = ledger.entries();
  const auto ro = ref::moe_forward(rm, x);
  const auto rgr = ref::moe_backward(rm, x, ro, dy, daux);
  auto add = [&](const std::string& n, const auto& actual, const M& expected) {
    out.checks.push_back({c.name + "." + n, compare(actual, expected)});
  };
  add("y", to_dense(f->y), ro.y);
  out.aux = static_cast<double>(f->aux);
  add("dx", to_dense(g->dx), rgr.dx);
  add("drouter", to_dense(rg->router), rgr.drouter);
  const bool glu = c.act == nn::Activation::swiglu;
  for (std::size_t q = 0; q < layer.experts().size(); ++q) {
    const Index e = layer.expert_index(static_cast<Index>(q));
    const auto& eg = rgr.experts[static_cast<std::size_t>(e)];
    const auto& pg = rg->experts[q];
    const std::string tag = "expert" + std::to_string(e);
    add(tag + ".dw1", pg.fc1.dw, glu ? ref::swiglu_physical(eg.dw1, eg.dwu, etp_size) : eg.dw1);
    add(tag + ".dw2", pg.fc2.dw, eg.dw2);
    if (c.bias) {
      add(tag + ".db1", *pg.fc1.db, glu ? ref::swiglu_physical(eg.db1, eg.dbu, etp_size) : eg.db1);
      add(tag + ".db2", *pg.fc2.db, eg.db2);
    }
  }
  return out;
}

/// The collectives one rank's ledger must hold, from the dense twin's routing alone (T tokens on EP
/// ranks in row blocks; rank d owns experts [d·E/EP, (d+1)·E/EP)):
///   fwd: all_gather EP·2E (counts); all_to_all k·T_l·h (dispatch) and N·h (combine), N = Σ_{e mine} c_e;
///        one all_reduce n_e·h per own expert with n_e > 0 (n_e: its kept assignments)
///   bwd: all_to_all k·T_l·h and N·h, the same all_reduces;  step: all_reduce h·E
struct Expected {
  std::vector<std::size_t> fwd_a2a, bwd_a2a, fwd_ar, bwd_ar, fwd_ag, step_ar;
};
inline Expected expected_ledger(const Case& c, const ref::MoeOut& ro, int ep_size, int ep_rank) {
  const std::size_t h = static_cast<std::size_t>(c.hidden), el = static_cast<std::size_t>(c.experts / ep_size);
  const std::size_t tl = static_cast<std::size_t>(c.tokens / ep_size);
  std::size_t n = 0;
  std::vector<std::size_t> ar;
  for (std::size_t e = el * static_cast<std::size_t>(ep_rank); e < el * static_cast<std::size_t>(ep_rank + 1); ++e) {
    n += static_cast<std::size_t>(ro.count[e]);
    if (ro.processed[e] > 0) ar.push_back(static_cast<std::size_t>(ro.processed[e]) * h);
  }
  Expected x;
  x.fwd_a2a = {static_cast<std::size_t>(c.k) * tl * h, n * h};
  x.bwd_a2a = {static_cast<std::size_t>(c.k) * tl * h, n * h};
  x.fwd_ar = ar;
  x.bwd_ar = ar;
  x.fwd_ag = {static_cast<std::size_t>(ep_size) * 2 * static_cast<std::size_t>(c.experts)};
  x.step_ar = {h * static_cast<std::size_t>(c.experts)};
  return x;
}

/// The ledger's elements of one kind in one top scope, in order.
inline std::vector<std::size_t> elements(const std::vector<LedgerEntry>& es, CollectiveKind k, const std::string& top) {
  std::vector<std::size_t> out;
  for (const auto& e : es)
    if (e.kind == k && Ledger::in_scope(e.scope, top)) out.push_back(e.elements);
  return out;
}
inline std::size_t bytes(const std::vector<LedgerEntry>& es, CollectiveKind k) {
  std::size_t b = 0;
  for (const auto& e : es)
    if (e.kind == k) b += e.bytes;
  return b;
}

/// Whether rank's ledger equals the analytic one (every collective of the layer, nothing else).
inline std::string ledger_mismatch(const RankResult& r, const Expected& x, std::size_t elem_bytes) {
  using CK = CollectiveKind;
  std::string why;
  auto cmp = [&](const char* what, const std::vector<std::size_t>& got, const std::vector<std::size_t>& want) {
    if (got != want) why += std::string(what) + " differs; ";
  };
  cmp("fwd all_to_all", elements(r.ledger, CK::all_to_all, "fwd"), x.fwd_a2a);
  cmp("bwd all_to_all", elements(r.ledger, CK::all_to_all, "bwd"), x.bwd_a2a);
  cmp("fwd all_reduce", elements(r.ledger, CK::all_reduce, "fwd"), x.fwd_ar);
  cmp("bwd all_reduce", elements(r.ledger, CK::all_reduce, "bwd"), x.bwd_ar);
  cmp("fwd all_gather", elements(r.ledger, CK::all_gather, "fwd"), x.fwd_ag);
  cmp("step all_reduce", elements(r.ledger, CK::all_reduce, "step"), x.step_ar);
  const std::size_t total = 2 * x.fwd_a2a.size() + x.fwd_ar.size() + x.bwd_ar.size() + x.fwd_ag.size() + x.step_ar.size();
  if (r.ledger.size() != total) why += "entries " + std::to_string(r.ledger.size()) + " != " + std::to_string(total) + "; ";
  std::size_t a2a_bytes = 0;
  for (auto v : x.fwd_a2a) a2a_bytes += 2 * v * elem_bytes;
  if (bytes(r.ledger, CK::all_to_all) != a2a_bytes) why += "all_to_all bytes differ; ";
  return why;
}

}  // namespace mc
