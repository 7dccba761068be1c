// tools/verify/explain_block.hpp — --explain: block 0 re-executed operation by operation with
// verify::ExplainLog (each operation's layouts read from the C++ types of its operands and result,
// each collective from the ledger entries it caused); the traced results are then checked bit for
// bit against TransformerBlock::forward/backward and its ledger, so the listing is what the block
// executes.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/observe/derivation.hpp"
#include "shardalg/verify/gather.hpp"

namespace sv {

using namespace shardalg;

struct Dims {
  Index T, h, heads, groups, d, ffn, vocab, padded;
  int p;
  bool bias;
  /// The element count written in the model's symbols when it is one of the usual ones.
  [[nodiscard]] std::string sym(std::size_t n) const {
    const auto N = static_cast<Index>(n);
    // the block's collectives only (what --explain lists): activations, norm weights, K/V sync
    if (N == T * h) return "T·h";
    if (N == 2 * h) return "2·h";
    if (N == h) return "h";
    if (N == (h + (bias ? 1 : 0)) * 2 * groups * d) return bias ? "(h+1)·2·g·d" : "h·2·g·d";
    return std::to_string(n);
  }
};

/// What --explain found: block 0's listing and the check that it is what the block ran.
struct ExplainResult {
  bool sequence_parallel = false;
  Dims dims;
  std::vector<verify::ExplainStep> forward, backward;
  double max_abs_difference = 0;
  std::size_t traced_collectives = 0, block_collectives = 0;
  bool collectives_identical = false;
  [[nodiscard]] bool bit_identical() const { return max_abs_difference == 0.0; }
  /// Bit-identical, the same collectives, and every matmul<To> plan agrees with the block.
  [[nodiscard]] bool pass() const {
    bool ok = collectives_identical && bit_identical();
    for (const auto& s : forward)
      if (s.plan) ok = ok && s.plan_agrees;
    return ok;
  }
};

template <class X>
std::string nm(const std::string& name, const X& x) {
  return verify::layout_name(name, x);
}

template <class S>
double max_diff_any(const S& a, const S& b) {
  return static_cast<double>((a.local() - b.local()).cwiseAbs().maxCoeff());
}

/// Block 0 re-executed operation by operation. SP: the sequence-parallel block (RowSharded between
/// blocks; all_gather enters and reduce_scatter leaves each tensor-parallel region; the norms'
/// Partial weight gradients all-reduced at the end, as SequenceParallelBlock::reduce_grads does).
template <class T, bool SP, class Blk, class X, class Fwd, class Grads>
ExplainResult explain_block(const Blk& blk, const X& x, const X& dy, const Fwd& real_f, const X& real_dx, const Grads& rp,
                            Ledger& ledger, const Dims& dims, const std::string& real_scope) {
  using B = CpuBackend;
  using RT = Sharded<T, Replicated>;
  using CT = Sharded<T, ColSharded>;
  verify::ExplainLog ex(ledger);
  const auto& cfg = blk.config();
  const auto& attn = blk.attention();
  const auto& lay = attn.layout();
  const auto& mlp = blk.mlp();
  const std::string norm = std::string(nn::norm_name(cfg.norm));
  const nn::Dropout da(cfg.dropout, cfg.dropout_seed, nn::tensor_id(cfg.layer, nn::TensorKind::dropout_attn));
  const nn::Dropout dm(cfg.dropout, cfg.dropout_seed, nn::tensor_id(cfg.layer, nn::TensorKind::dropout_mlp));
  const nn::AttnShape shape{x.rows() / cfg.seq, cfg.seq, lay.units(), lay.q_per_unit(), lay.head_dim};
  const nn::AttnDropout adrop = attn.dropout(x.group());  // attention dropout's key (p = 0: inactive)
  const bool glu = cfg.act == nn::Activation::swiglu;
  const std::string drop_note = cfg.dropout > 0 ? "mask keyed by global index: the dense mask, no comm" : "p = 0: identity";
  const std::string in_lbl = SP ? "enter" : "f", out_lbl = SP ? "leave" : "g";
  // the redistributions at the boundaries of a tensor-parallel region
  auto enter = [&](const X& v) -> RT {
    if constexpr (SP) return all_gather(v);
    else return copy_to(v);
  };
  auto leave = [&](Sharded<T, Partial> v) -> X {
    if constexpr (SP) return reduce_scatter<RowSharded>(v);
    else return reduce_from(std::move(v));
  };
  auto enter_adj = [&](const X& v) -> RT {
    if constexpr (SP) return adjoint::reduce_scatter(v);
    else return adjoint::reduce_from(v);
  };
  auto leave_adj = [&](Sharded<T, Partial> v) -> X {
    if constexpr (SP) return adjoint::all_gather<RowSharded>(v);
    else return adjoint::copy_to(std::move(v));
  };
  std::size_t k;
  auto sc = ledger.scope("explain");

  // ---- forward ----
  ex.to_forward();
  k = ex.mark();
  auto l1 = blk.ln1().forward(x);
  ex.op(k, nm("X", x) + " → " + norm + "₁ → " + nm("A", l1.y),
        SP ? "this rank's tokens, whole rows: local" : "statistics over whole rows: every rank has them");
  k = ex.mark();
  RT a = enter(l1.y);
  ex.redist(k, nm("A", l1.y), in_lbl, nm("A", a), SP ? "gather the tokens for the column-parallel QKV" : "f = copy_to: identity forward; its adjoint is an all_reduce");
  const auto& wqkv = attn.qkv().weight();
  k = ex.mark();
  CT qkv = matmul(a, wqkv);
  ex.op(k, nm("A", a) + " · " + nm("Wqkv", wqkv) + " → " + nm("QKV", qkv),
        "fused Q|K|V, " + std::to_string(lay.units() * lay.q_per_unit()) + " query heads per rank");
  if (attn.qkv().bias()) {
    k = ex.mark();
    qkv = add_bias(qkv, *attn.qkv().bias());
    ex.op(k, nm("QKV", qkv) + " + " + nm("bqkv", *attn.qkv().bias()) + " → " + nm("QKV", qkv));
  }
  k = ex.mark();
  auto ao = adrop.active() ? nn::Kernels<B>::causal_attention(qkv.local(), shape, adrop)
                           : nn::Kernels<B>::causal_attention(qkv.local(), shape);
  CT o(std::move(ao.out), x.rows(), cfg.hidden, x.group());
  ex.op(k, std::string(adrop.active() ? "dropout(softmax(causal(Q·Kᵀ/√d)))·V" : "softmax(causal(Q·Kᵀ/√d))·V") +
               " per head: " + nm("QKV", qkv) + " → " + nm("O", o),
        adrop.active() ? "each rank owns whole heads; mask keyed by global (sequence, head, query, key): local"
                       : "each rank owns whole heads: local");
  const auto& wo = attn.proj().weight();
  k = ex.mark();
  auto zp = matmul(o, wo);
  ex.op(k, nm("O", o) + " · " + nm("Wo", wo) + " → " + nm("Z", zp), "contracting dimension split: a Partial sum");
  const std::string zp_txt = nm("Z", zp);
  k = ex.mark();
  X z = leave(std::move(zp));
  ex.redist(k, zp_txt, out_lbl, nm("Z", z), SP ? "sum and split the tokens" : "g = reduce_from");
  ex.plan<typename X::layout>(o, wo, "O", "Wo", "Z");
  if (attn.proj().bias()) {
    k = ex.mark();
    z = add_bias(z, *attn.proj().bias());
    ex.op(k, nm("Z", z) + " + " + nm("bo", *attn.proj().bias()) + " → " + nm("Z", z), "bias added once, after the reduction");
  }
  k = ex.mark();
  X zd = da.forward(z);
  ex.op(k, "dropout(" + nm("Z", z) + ") → " + nm("Z", zd), drop_note);
  k = ex.mark();
  X y1 = x + zd;
  ex.op(k, nm("X", x) + " + " + nm("Z", zd) + " → " + nm("Y1", y1), "residual");
  k = ex.mark();
  auto l2 = blk.ln2().forward(y1);
  ex.op(k, nm("Y1", y1) + " → " + norm + "₂ → " + nm("M", l2.y));
  k = ex.mark();
  RT mi = enter(l2.y);
  ex.redist(k, nm("M", l2.y), in_lbl, nm("M", mi));
  const auto& w1 = mlp.fc1().weight();
  k = ex.mark();
  CT hh = matmul(mi, w1);
  ex.op(k, nm("M", mi) + " · " + nm("W1", w1) + " → " + nm("H", hh), glu ? "[gate_r | up_r] per rank" : "");
  if (mlp.fc1().bias()) {
    k = ex.mark();
    hh = add_bias(hh, *mlp.fc1().bias());
    ex.op(k, nm("H", hh) + " + " + nm("b1", *mlp.fc1().bias()) + " → " + nm("H", hh));
  }
  k = ex.mark();
  CT act = [&]() -> CT {
    switch (cfg.act) {
      case nn::Activation::gelu_tanh: return map(hh, nn::GeluTanh{});
      case nn::Activation::gelu_erf: return map(hh, nn::GeluErf{});
      case nn::Activation::swiglu: break;
    }
    return CT(nn::Kernels<B>::swiglu(hh.local()), hh.rows(), cfg.ffn, hh.group());
  }();
  ex.op(k, std::string(glu ? "silu(gate)⊙up" : "GeLU") + "(" + nm("H", hh) + ") → " + nm("G", act),
        "element-wise on column blocks: commutes with the split");
  const auto& w2 = mlp.fc2().weight();
  k = ex.mark();
  auto z2p = matmul(act, w2);
  ex.op(k, nm("G", act) + " · " + nm("W2", w2) + " → " + nm("Z", z2p));
  const std::string z2p_txt = nm("Z", z2p);
  k = ex.mark();
  X z2 = leave(std::move(z2p));
  ex.redist(k, z2p_txt, out_lbl, nm("Z", z2));
  ex.plan<typename X::layout>(act, w2, "G", "W2", "Z");
  if (mlp.fc2().bias()) {
    k = ex.mark();
    z2 = add_bias(z2, *mlp.fc2().bias());
    ex.op(k, nm("Z", z2) + " + " + nm("b2", *mlp.fc2().bias()) + " → " + nm("Z", z2));
  }
  k = ex.mark();
  X z2d = dm.forward(z2);
  ex.op(k, "dropout(" + nm("Z", z2) + ") → " + nm("Z", z2d), drop_note);
  k = ex.mark();
  X y = y1 + z2d;
  ex.op(k, nm("Y1", y1) + " + " + nm("Z", z2d) + " → " + nm("Y", y), "residual");

  // ---- backward ----
  ex.to_backward();
  k = ex.mark();
  X dz2 = dm.backward(dy);
  ex.op(k, "dropout′(" + nm("dY", dy) + ") → " + nm("dZ", dz2));
  k = ex.mark();
  RT dz2r = enter_adj(dz2);
  ex.redist(k, nm("dZ", dz2), out_lbl + "′", nm("dZ", dz2r), SP ? "reduce_scatter's adjoint" : "g's adjoint is the identity");
  k = ex.mark();
  CT dg = matmul(dz2r, transpose(w2));
  ex.op(k, nm("dZ", dz2r) + " · " + nm("W2", transpose(w2)) + " → " + nm("dG", dg));
  k = ex.mark();
  auto dw2 = matmul(transpose(act), dz2r);
  ex.op(k, nm("G", transpose(act)) + " · " + nm("dZ", dz2r) + " → " + nm("dW2", dw2));
  std::optional<RT> db2;
  if (mlp.fc2().bias()) {
    k = ex.mark();
    db2 = col_sum(dz2r);
    ex.op(k, "Σ_rows " + nm("dZ", dz2r) + " → " + nm("db2", *db2), "every rank holds the whole bias gradient");
  }
  k = ex.mark();
  CT dh = [&]() -> CT {
    switch (cfg.act) {
      case nn::Activation::gelu_tanh: return hadamard(dg, map(hh, nn::GeluTanhGrad{}));
      case nn::Activation::gelu_erf: return hadamard(dg, map(hh, nn::GeluErfGrad{}));
      case nn::Activation::swiglu: break;
    }
    return CT(nn::Kernels<B>::swiglu_grad(hh.local(), dg.local()), hh.rows(), hh.cols(), hh.group());
  }();
  ex.op(k, nm("dG", dg) + " ⊙ act′(" + nm("H", hh) + ") → " + nm("dH", dh));
  k = ex.mark();
  auto dmp = matmul(dh, transpose(w1));
  ex.op(k, nm("dH", dh) + " · " + nm("W1", transpose(w1)) + " → " + nm("dM", dmp));
  k = ex.mark();
  CT dw1 = matmul(transpose(mi), dh);
  ex.op(k, nm("M", transpose(mi)) + " · " + nm("dH", dh) + " → " + nm("dW1", dw1));
  std::optional<CT> db1;
  if (mlp.fc1().bias()) {
    k = ex.mark();
    db1 = col_sum(dh);
    ex.op(k, "Σ_rows " + nm("dH", dh) + " → " + nm("db1", *db1));
  }
  const std::string dmp_txt = nm("dM", dmp);
  k = ex.mark();
  X dmr = leave_adj(std::move(dmp));
  ex.redist(k, dmp_txt, in_lbl + "′", nm("dM", dmr), SP ? "all_gather's adjoint on a Partial cotangent" : "f's adjoint sums the ranks' contributions");
  k = ex.mark();
  auto g2 = blk.ln2().backward(l2.cache, dmr);
  ex.op(k, norm + "₂′: " + nm("dM", dmr) + " → " + nm("dY1", g2.dx) + ", " + nm("dγ2", g2.params.dgamma),
        SP ? "each rank summed only its tokens: the weight gradient is Partial" : "replicated rows: the weight gradient is whole on every rank");
  k = ex.mark();
  X dy1 = dy + g2.dx;
  ex.op(k, nm("dY", dy) + " + " + nm("dY1", g2.dx) + " → " + nm("dY1", dy1), "residual");
  k = ex.mark();
  X dz1 = da.backward(dy1);
  ex.op(k, "dropout′(" + nm("dY1", dy1) + ") → " + nm("dZ", dz1));
  k = ex.mark();
  RT dz1r = enter_adj(dz1);
  ex.redist(k, nm("dZ", dz1), out_lbl + "′", nm("dZ", dz1r));
  k = ex.mark();
  CT dO = matmul(dz1r, transpose(wo));
  ex.op(k, nm("dZ", dz1r) + " · " + nm("Wo", transpose(wo)) + " → " + nm("dO", dO));
  k = ex.mark();
  auto dwo = matmul(transpose(o), dz1r);
  ex.op(k, nm("O", transpose(o)) + " · " + nm("dZ", dz1r) + " → " + nm("dWo", dwo));
  std::optional<RT> dbo;
  if (attn.proj().bias()) {
    k = ex.mark();
    dbo = col_sum(dz1r);
    ex.op(k, "Σ_rows " + nm("dZ", dz1r) + " → " + nm("dbo", *dbo));
  }
  k = ex.mark();
  CT dqkv(adrop.active() ? nn::Kernels<B>::causal_attention_grad(qkv.local(), ao.probs, dO.local(), shape, adrop)
                         : nn::Kernels<B>::causal_attention_grad(qkv.local(), ao.probs, dO.local(), shape),
          qkv.rows(), qkv.cols(), qkv.group());
  ex.op(k, "attention′ per head: " + nm("dO", dO) + " → " + nm("dQKV", dqkv), "local: whole heads");
  k = ex.mark();
  auto dap = matmul(dqkv, transpose(wqkv));
  ex.op(k, nm("dQKV", dqkv) + " · " + nm("Wqkv", transpose(wqkv)) + " → " + nm("dA", dap));
  k = ex.mark();
  CT dwqkv = matmul(transpose(a), dqkv);
  ex.op(k, nm("A", transpose(a)) + " · " + nm("dQKV", dqkv) + " → " + nm("dWqkv", dwqkv));
  std::optional<CT> dbqkv;
  if (attn.qkv().bias()) {
    k = ex.mark();
    dbqkv = col_sum(dqkv);
    ex.op(k, "Σ_rows " + nm("dQKV", dqkv) + " → " + nm("dbqkv", *dbqkv));
  }
  if (lay.replicated_kv()) {  // Attention's K/V replica sync is private: list what the block's own run recorded
    std::vector<LedgerEntry> c;
    for (const auto& e : ledger.entries())
      if (Ledger::in_scope(e.scope, "bwd/" + real_scope + "/attn/kv_replica_sync")) c.push_back(e);
    ex.push("dWqkv[C] K/V columns → sum over the ranks sharing a query group → dWqkv[C]",
            "from the block's own run (inside Attention's backward, not re-executed here)", std::move(c));
  }
  const std::string dap_txt = nm("dA", dap);
  k = ex.mark();
  X dar = leave_adj(std::move(dap));
  ex.redist(k, dap_txt, in_lbl + "′", nm("dA", dar));
  k = ex.mark();
  auto g1 = blk.ln1().backward(l1.cache, dar);
  ex.op(k, norm + "₁′: " + nm("dA", dar) + " → " + nm("dX", g1.dx) + ", " + nm("dγ1", g1.params.dgamma));
  k = ex.mark();
  X dx = dy1 + g1.dx;
  ex.op(k, nm("dY1", dy1) + " + " + nm("dX", g1.dx) + " → " + nm("dX", dx), "residual");
  // the norms' weight gradients in their parameters' layout
  std::optional<RT> dgam1, dgam2;
  if constexpr (SP) {
    const std::string t1 = nm("dγ1", g1.params.dgamma), t2 = nm("dγ2", g2.params.dgamma);
    const std::string pk = cfg.norm == nn::NormKind::layer ? " ‖ dβ" : "";
    k = ex.mark();
    auto r1 = nn::SequenceParallelBlock<T>::reduce_norm(std::move(g1.params));
    ex.redist(k, t1 + pk + "1", "reduce", nm("dγ1", r1.dgamma), "SequenceParallelBlock::reduce_grads, once per step");
    k = ex.mark();
    auto r2 = nn::SequenceParallelBlock<T>::reduce_norm(std::move(g2.params));
    ex.redist(k, t2 + pk + "2", "reduce", nm("dγ2", r2.dgamma));
    dgam1 = r1.dgamma;
    dgam2 = r2.dgamma;
  } else {
    dgam1 = g1.params.dgamma;
    dgam2 = g2.params.dgamma;
  }

  // ---- the trace is what ran: results bit for bit, collectives entry for entry ----
  double diff = std::max({max_diff_any(y, real_f.y), max_diff_any(dx, real_dx), max_diff_any(dw2, rp.mlp.fc2.dw),
                          max_diff_any(dw1, rp.mlp.fc1.dw), max_diff_any(dwo, rp.attn.proj.dw),
                          max_diff_any(*dgam2, rp.ln2.dgamma), max_diff_any(*dgam1, rp.ln1.dgamma)});
  if (!lay.replicated_kv()) diff = std::max(diff, max_diff_any(dwqkv, rp.attn.qkv.dw));
  if (db2) diff = std::max(diff, max_diff_any(*db2, *rp.mlp.fc2.db));
  if (db1) diff = std::max(diff, max_diff_any(*db1, *rp.mlp.fc1.db));
  if (dbo) diff = std::max(diff, max_diff_any(*dbo, *rp.attn.proj.db));
  if (dbqkv && !lay.replicated_kv()) diff = std::max(diff, max_diff_any(*dbqkv, *rp.attn.qkv.db));
  Group g = x.group();
  g.all_reduce(&diff, 1, ReduceOp::max, verify::kVerification);

  const auto traced = verify::collective_signatures(ledger.entries(), [](const LedgerEntry& e) {
    return Ledger::in_scope(e.scope, "explain");
  });
  const auto real = verify::collective_signatures(ledger.entries(), [&](const LedgerEntry& e) {
    const bool blockscope = Ledger::in_scope(e.scope, "fwd/" + real_scope) || Ledger::in_scope(e.scope, "bwd/" + real_scope);
    return blockscope && e.scope.find("kv_replica_sync") == std::string::npos;
  });
  ExplainResult r;
  r.sequence_parallel = SP;
  r.dims = dims;
  r.forward = std::move(ex.forward);
  r.backward = std::move(ex.backward);
  r.max_abs_difference = diff;
  r.traced_collectives = traced.size();
  r.block_collectives = real.size();
  r.collectives_identical = traced == real;
  return r;
}

}  // namespace sv
