// tests/gpt/sp_block_cases.hpp — the sequence-parallel block against the dense block
// (reference/dense_layers.hpp) on thread worlds of 1–4 ranks, and its ledger against the counts of
// the shared ALGEBRA.md with the activation bytes it holds between blocks, measured: written once
// here as function templates, run in float by test_sp_block.cpp and in double by
// test_sp_block_double.cpp (both types in one TU took 1.32 GB of compiler memory).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../layers/cases.hpp"  // the dense block cases of issue 3 (reference blocks, masters)
#include "shardalg/nn/optim/optim.hpp"
#include "shardalg/nn/layers/sp_block.hpp"

namespace sp_cases {
using namespace lt;
}  // namespace sp_cases


namespace sp_cases {

template <class T>
M ref_rnd(Index r, Index c, std::uint64_t s, double sc) {
  return rnd<T>(r, c, s, sc);
}

/// The SP block on X[Row]: output, input gradient and every *reduced* parameter gradient
/// against the dense block.
template <class T>
Checks case_sp_block(const Group& g, const BlockCase& bc) {
  Checks cs;
  const int p = g.size();
  const bool center = bc.norm == nn::NormKind::layer, glu = bc.act == nn::Activation::swiglu;
  const std::string tag = std::string("sp_block.") + (center ? "ln" : "rms") + (glu ? ".swiglu" : ".gelu") + ".g" +
                          std::to_string(bc.groups);
  const auto rb = make_ref_block(bc, [](Index r, Index c, std::uint64_t s, double sc) { return ref_rnd<T>(r, c, s, sc); });
  const auto blk = nn::SequenceParallelBlock<T>::from_dense(block_config(bc), block_masters(bc, rb), g);
  const M x = rnd<T>(kTokens, kHidden, 101), dy = rnd<T>(kTokens, kHidden, 102);
  const auto f = blk.forward(shard_as<RowSharded, T, CpuBackend>(x, g));
  const auto ro = ref::block_forward(rb, x);
  add(cs, tag + ".y", f.y, ro.y);
  const auto gr = blk.backward(f.cache, shard_as<RowSharded, T, CpuBackend>(dy, g));
  const auto rg = ref::block_backward(rb, x, ro, dy);
  add(cs, tag + ".dx", gr.dx, rg.dx);
  // The norm gradients come out Partial; their dense value (Σ over ranks) is already the gradient.
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(gr.params.ln1.dgamma)>, Sharded<T, Partial>>);
  add(cs, tag + ".ln1.dgamma(partial)", gr.params.ln1.dgamma, rg.ln1.dgamma);
  const auto red = blk.reduce_grads(gr.params);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(red.ln1.dgamma)>, Sharded<T, Replicated>>);
  add(cs, tag + ".ln1.dgamma", red.ln1.dgamma, rg.ln1.dgamma);
  add(cs, tag + ".ln2.dgamma", red.ln2.dgamma, rg.ln2.dgamma);
  if (center) {
    add(cs, tag + ".ln1.dbeta", *red.ln1.dbeta, rg.ln1.dbeta);
    add(cs, tag + ".ln2.dbeta", *red.ln2.dbeta, rg.ln2.dbeta);
  }
  add_attn_grads<T, CpuBackend>(cs, tag + ".attn", red.attn, rg.attn, bc.groups, p, bc.bias);
  const auto& pm = red.mlp;
  add(cs, tag + ".mlp.dw1", pm.fc1.dw, glu ? swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, p) : rg.mlp.dw1);
  add(cs, tag + ".mlp.dw2", pm.fc2.dw, rg.mlp.dw2);
  if (bc.bias) {
    add(cs, tag + ".mlp.db1", *pm.fc1.db, glu ? swiglu_physical(rg.mlp.db1, rg.mlp.dbu, p) : rg.mlp.db1);
    add(cs, tag + ".mlp.db2", *pm.fc2.db, rg.mlp.db2);
  }
  // Every replicated gradient is bit-identical on every rank after the reduction.
  CHECK(replicas_agree(red.ln1.dgamma));
  CHECK(replicas_agree(red.ln2.dgamma));
  if (bc.bias) CHECK(replicas_agree(*red.attn.proj.db));
  return cs;
}

struct Worst {
  double rel = 0;
  std::string what;
};
inline Worst& worst(bool dbl) {  // one per program: the z test reads both types
  static Worst w[2];
  return w[dbl ? 1 : 0];
}
template <class T>
void expect(const Checks& cs, int p) {
  REQUIRE(!cs.empty());
  for (const auto& c : cs) {
    CHECK_MESSAGE(c.err.within(tol<T>), c.name << " p=" << p << ": " << c.err);
    auto& w = worst(std::is_same_v<T, double>);
    if (c.err.max_rel >= w.rel) w = {c.err.max_rel, c.name + " p=" + std::to_string(p)};
  }
}

}  // namespace sp_cases

namespace sp_cases {
/// The sequence-parallel block equals the dense block (LN/RMS, GeLU/SwiGLU, MHA/GQA, dropout).
template <class T>
void block_equals_dense() {
  for (int p : {1, 2, 3, 4}) {
    for (const auto& bc : block_cases(p)) {
      CAPTURE(p);
      const auto cs = testing::per_rank<Checks>(p, [&](const Group& g) { return case_sp_block<T>(g, bc); });
      for (int r = 0; r < p; ++r) expect<T>(cs[r], p);
    }
  }
}
}  // namespace sp_cases

// =============================================================================================
// Ledger and activation memory
// =============================================================================================
namespace sp_cases {
struct SpLedger {
  std::map<std::string, std::vector<std::pair<CollectiveKind, std::size_t>>> by_scope;
  double sp_traffic = 0, plain_traffic = 0;  // ring bytes per rank, block forward + backward
  std::size_t norm_reduce_elements = 0, norm_reduces = 0;
  std::size_t held_sp = 0, held_plain = 0;           // bytes of the activation passed between blocks
  std::size_t cache_sp = 0, cache_plain = 0;         // bytes of everything the block keeps for backward
  std::size_t ln_dropout_sp = 0, ln_dropout_plain = 0;  // of which: norm x̂ and rstd (the sharded part)
  bool same_output = false;
};

template <class T, class Mat>
std::size_t bytes_of(const Mat& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(T);
}
template <class T, class S>
std::size_t sbytes(const S& s) {
  return bytes_of<T>(s.local());
}
/// Bytes of the block cache's local blocks, counted field by field.
template <class T, class C>
std::size_t cache_bytes(const C& c, std::size_t* norms) {
  const std::size_t n = sbytes<T>(c.ln1.xhat) + bytes_of<T>(c.ln1.rstd) + sbytes<T>(c.ln2.xhat) + bytes_of<T>(c.ln2.rstd);
  if (norms) *norms = n;
  return n + sbytes<T>(c.attn.qkv_in.x) + sbytes<T>(c.attn.qkv) + bytes_of<T>(c.attn.probs) + sbytes<T>(c.attn.proj.h) +
         sbytes<T>(c.mlp.fc1.x) + sbytes<T>(c.mlp.h) + sbytes<T>(c.mlp.fc2.h);
}

inline double ring(CollectiveKind k, double v, int p) {
  if (k == CollectiveKind::all_reduce) return 2.0 * (p - 1) / p * v;
  return double(p - 1) / p * v;  // all_gather, reduce_scatter
}

template <class T>
SpLedger sp_ledger(const Group& comm, const BlockCase& bc) {
  Ledger ledger;
  const Group g = ledgered(comm, ledger);
  const int p = g.size();
  const auto rb = make_ref_block(bc, [](Index r, Index c, std::uint64_t s, double sc) { return ref_rnd<T>(r, c, s, sc); });
  const auto masters = block_masters(bc, rb);
  const auto sp = nn::SequenceParallelBlock<T>::from_dense(block_config(bc), masters, g);
  const auto plain = nn::TransformerBlock<T>::from_dense(block_config(bc), masters, g);
  const M x = rnd<T>(kTokens, kHidden, 101), dy = rnd<T>(kTokens, kHidden, 102);
  SpLedger s;
  typename nn::SequenceParallelBlock<T>::ParamGrads spg;
  M y_sp, y_plain;
  {
    auto sc = ledger.scope("sp.fwd");
    auto f = sp.forward(shard_as<RowSharded, T, CpuBackend>(x, g));
    s.held_sp = sbytes<T>(f.y);
    s.cache_sp = cache_bytes<T>(f.cache, &s.ln_dropout_sp);
    y_sp = to_dense(f.y).template cast<double>();
    auto sb = ledger.scope("bwd");
    spg = sp.backward(f.cache, shard_as<RowSharded, T, CpuBackend>(dy, g)).params;
  }
  {
    auto sc = ledger.scope("sp.step");
    (void)sp.reduce_grads(spg);
  }
  {
    auto sc = ledger.scope("plain.fwd");
    auto f = plain.forward(shard_as<Replicated, T, CpuBackend>(x, g));
    s.held_plain = sbytes<T>(f.y);
    s.cache_plain = cache_bytes<T>(f.cache, &s.ln_dropout_plain);
    y_plain = to_dense(f.y).template cast<double>();
    auto sb = ledger.scope("bwd");
    (void)plain.backward(f.cache, shard_as<Replicated, T, CpuBackend>(dy, g));
  }
  s.same_output = compare(y_sp, y_plain).within(tol<T>);
  for (const auto& e : ledger.entries()) {
    s.by_scope[e.scope].push_back({e.kind, e.elements});
    if (Ledger::in_scope(e.scope, "sp.fwd")) s.sp_traffic += ring(e.kind, double(e.bytes), p);
    if (Ledger::in_scope(e.scope, "plain.fwd")) s.plain_traffic += ring(e.kind, double(e.bytes), p);
  }
  s.norm_reduces = ledger.count(CollectiveKind::all_reduce, "sp.step");
  for (const auto& e : ledger.select("sp.step")) s.norm_reduce_elements += e.elements;
  return s;
}
}  // namespace sp_cases

namespace sp_cases {
/// SP ledger per block: 2 all_gather + 2 reduce_scatter of T·h each way, norm weights 2h each, the
/// same bytes as 4 all-reduces; activations between blocks / P.
template <class T>
void ledger_per_block() {
  using CK = CollectiveKind;
  const std::size_t th = kTokens * kHidden;
  const BlockCase bc{nn::NormKind::layer, nn::Activation::gelu_tanh, true, kHeads, 0.1};
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    const auto all = testing::per_rank<SpLedger>(p, [&](const Group& g) { return sp_ledger<T>(g, bc); });
    for (const auto& s : all) {
      using V = std::vector<std::pair<CK, std::size_t>>;
      CHECK(s.same_output);
      CHECK(s.by_scope.at("sp.fwd/attn") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
      CHECK(s.by_scope.at("sp.fwd/mlp") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
      CHECK(s.by_scope.at("sp.fwd/bwd/mlp") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
      CHECK(s.by_scope.at("sp.fwd/bwd/attn") == V{{CK::all_gather, th}, {CK::reduce_scatter, th}});
      CHECK(s.by_scope.count("sp.fwd") == 0);      // nothing outside the two sub-layers
      CHECK(s.by_scope.count("sp.fwd/bwd") == 0);
      // The norm weights: one all_reduce of γ‖β (2h) per norm, once per step.
      CHECK(s.by_scope.at("sp.step/norm_grads") == V{{CK::all_reduce, 2 * kHidden}, {CK::all_reduce, 2 * kHidden}});
      CHECK(s.norm_reduces == 2);
      CHECK(s.norm_reduce_elements == 4 * static_cast<std::size_t>(kHidden));
      // The plain block: 2 all_reduce forward and backward; the same ring bytes per rank.
      CHECK(s.by_scope.at("plain.fwd/attn") == V{{CK::all_reduce, th}});
      CHECK(s.by_scope.at("plain.fwd/bwd/mlp") == V{{CK::all_reduce, th}});
      CHECK(s.sp_traffic == doctest::Approx(s.plain_traffic).epsilon(1e-15));
      CHECK(s.sp_traffic > 0);
      // Measured activation bytes held between blocks: T·h·e without SP, T·h·e / P with it.
      CHECK(s.held_plain == th * sizeof(T));
      CHECK(s.held_plain == static_cast<std::size_t>(p) * s.held_sp);
      CHECK(s.ln_dropout_plain == static_cast<std::size_t>(p) * s.ln_dropout_sp);
      CHECK(s.cache_sp < s.cache_plain);
    }
    const auto& s = all[0];
    MESSAGE("p=" << p << " " << std::string(sizeof(T) == 8 ? "double" : "float") << ": between blocks " << s.held_plain
                 << " B/rank without SP, " << s.held_sp << " B/rank with SP (ratio " << double(s.held_plain) / s.held_sp
                 << "); block cache " << s.cache_plain << " B -> " << s.cache_sp << " B (norm part " << s.ln_dropout_plain
                 << " -> " << s.ln_dropout_sp << "); ring bytes/rank fwd+bwd " << s.sp_traffic << " (SP) vs "
                 << s.plain_traffic << " (all-reduce)");
  }
}
}  // namespace sp_cases

// =============================================================================================
// Optimizers
// =============================================================================================
