// tools/verify/run_rank.hpp — one rank's run: shard the dense masters, one forward and backward
// pass layer by layer (ledgered, timed), the checks against the dense reference, nn::Gpt on the
// same masters, --explain, memory; then every rank's measurements gathered to rank 0, which
// assembles the rows (rows.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dump.hpp"
#include "explain_block.hpp"
#include "model.hpp"
#include "options.hpp"
#include "result.hpp"
#include "rows.hpp"
#include "trace.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/verify/verify.hpp"

namespace sv {

using verify::Clock;
using verify::EventLog;
using verify::nbytes;
using verify::sum_bytes;

// Physical layouts of the fused weights: the reference's own construction (shardalg/reference).
using ref::qkv_physical;
using ref::swiglu_physical;

template <class T, bool SP>
void run_rank(Group raw, const Options& o, const DenseModel& dm, RankResult* out,
              const std::function<void(const std::string&, bool)>& progress) {
  using L = std::conditional_t<SP, RowSharded, Replicated>;
  using X = Sharded<T, L>;
  using Blk = std::conditional_t<SP, nn::SequenceParallelBlock<T>, nn::TransformerBlock<T>>;
  using Emb = nn::VocabParallelEmbedding<T>;
  using Norm = nn::LayerNorm<T>;
  using RGrads = typename nn::TransformerBlock<T>::ParamGrads;  // = SequenceParallelBlock::ReducedGrads
  const int p = raw.size(), rank = raw.rank();
  const bool root = rank == 0 && out != nullptr;  // with --dp: only the world's rank 0 reports
  // a progress line; `phase`: a new phase (printed even within a second of the last line)
  auto say = [&](const std::string& s, bool phase = false) {
    if (root) progress(s, phase);
  };
  const Index Tk = o.tokens(), h = o.hidden;
  const std::size_t nlayers = static_cast<std::size_t>(o.layers);

  raw.barrier();
  EventLog log;  // t0 taken right after the barrier: the ranks' clocks are aligned to it
  Ledger ledger;
  log.ledger = &ledger;
  Group g = ledgered(verify::Timed<Group>(raw, log), ledger);

  // ---- α, β of this group -------------------------------------------------------------------
  say("calibrating α, β");
  cost::Calibration cal;
  {
    EventLog::Phase ph(log, "calibrate α, β (all_reduce 4 KiB … 1 MiB)", "setup");
    cal = cost::calibrate_all_reduce(raw, {1u << 10, 1u << 13, 1u << 16, 1u << 18}, 9);
  }

  // ---- shard the masters ----------------------------------------------------------------------
  say("sharding the weights");
  std::vector<Blk> blocks;
  std::optional<Emb> emb;
  std::optional<Norm> lnf;
  const nn::VocabParallelCrossEntropy<T> ce(o.vocab);
  const nn::Dropout drop_emb(o.dropout, drop_seed(o), nn::tensor_id(0, nn::embedding_dropout_kind));
  {
    EventLog::Phase ph(log, "shard weights", "setup");
    const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu;
    emb.emplace(Emb::from_dense(dm.g.emb, g, o.vocab_divisor));
    for (int l = 0; l < o.layers; ++l) {
      const auto& rb = dm.g.blocks[static_cast<std::size_t>(l)];
      const auto nb = [&](const M& m) -> const M* { return o.no_bias ? nullptr : &m; };
      nn::BlockMasters<M> m{&rb.ln1.gamma, center ? &rb.ln1.beta : nullptr, {&rb.attn.wq, nb(rb.attn.bq), &rb.attn.wk,
                            nb(rb.attn.bk), &rb.attn.wv, nb(rb.attn.bv), &rb.attn.wo, nb(rb.attn.bo)},
                            &rb.ln2.gamma, center ? &rb.ln2.beta : nullptr,
                            {&rb.mlp.w1, nb(rb.mlp.b1), glu ? &rb.mlp.wu : nullptr, glu ? nb(rb.mlp.bu) : nullptr,
                             &rb.mlp.w2, nb(rb.mlp.b2)}};
      blocks.push_back(Blk::from_dense(block_config(o, l), m, g));
    }
    lnf.emplace(Norm::from_dense(dm.g.final_norm.gamma, center ? &dm.g.final_norm.beta : nullptr, o.norm_kind(), g, T(kEps)));
  }

  // ---- one forward and backward pass, layer by layer, ledgered and timed ----------------------
  std::optional<std::conditional_t<SP, typename Emb::ForwardSP, typename Emb::Forward>> ef;
  std::optional<X> x0;
  std::vector<typename Blk::Forward> bf;
  std::optional<typename Norm::template Forward<L>> ff;
  std::optional<typename Emb::HeadForward> hf;
  std::optional<typename nn::VocabParallelCrossEntropy<T>::Forward> lf;
  std::optional<Sharded<T, ColSharded>> dlogits;
  std::optional<std::conditional_t<SP, typename Emb::HeadGradsSP, typename Emb::HeadGrads>> hg;
  std::optional<X> fdx;
  std::optional<typename Norm::template ParamGrads<Replicated>> fgp;
  std::vector<std::optional<X>> bdx(nlayers), dys(nlayers);
  std::vector<std::optional<RGrads>> bgp(nlayers);
  std::optional<typename Emb::ParamGrads> eg;
  std::optional<Sharded<T, RowSharded>> dE;

  raw.barrier();
  const auto step0 = Clock::now();
  {
    auto s0 = ledger.scope("fwd");
    {
      auto s = ledger.scope("embed");
      EventLog::Phase ph(log, "forward embedding", "forward", "fwd/embed");
      if constexpr (SP) ef.emplace(emb->forward_sp(dm.ids));
      else ef.emplace(emb->forward(dm.ids));
      x0.emplace(drop_emb.forward(ef->y));
    }
    const X* x = &*x0;
    for (std::size_t l = 0; l < nlayers; ++l) {
      say("forward block " + std::to_string(l) + "/" + std::to_string(nlayers));
      const std::string key = "block" + std::to_string(l);
      auto s = ledger.scope(key);
      EventLog::Phase ph(log, "forward block " + std::to_string(l), "forward", "fwd/" + key);
      bf.push_back(blocks[l].forward(*x));
      x = &bf.back().y;
    }
    {
      auto s = ledger.scope("final_norm");
      EventLog::Phase ph(log, "forward final norm", "forward", "fwd/final_norm");
      ff.emplace(lnf->forward(*x));
    }
    {
      auto s = ledger.scope("head");
      EventLog::Phase ph(log, "forward LM head (tied)", "forward", "fwd/head");
      if constexpr (SP) hf.emplace(emb->logits_sp(ff->y));
      else hf.emplace(emb->logits(ff->y));
    }
    {
      auto s = ledger.scope("loss");
      EventLog::Phase ph(log, "forward cross-entropy", "forward", "fwd/loss");
      lf.emplace(ce.forward(hf->logits, dm.targets));
    }
  }
  {
    auto s0 = ledger.scope("bwd");
    {
      auto s = ledger.scope("loss");
      EventLog::Phase ph(log, "backward cross-entropy", "backward", "bwd/loss");
      dlogits.emplace(ce.backward_mean(lf->cache));
    }
    {
      auto s = ledger.scope("head");
      EventLog::Phase ph(log, "backward LM head", "backward", "bwd/head");
      if constexpr (SP) hg.emplace(emb->logits_backward_sp(hf->cache, *dlogits));
      else hg.emplace(emb->logits_backward(hf->cache, *dlogits));
    }
    {
      auto s = ledger.scope("final_norm");
      EventLog::Phase ph(log, "backward final norm", "backward", "bwd/final_norm");
      auto gr = lnf->backward(ff->cache, hg->dx);
      fdx.emplace(std::move(gr.dx));
      if constexpr (SP) fgp.emplace(nn::SequenceParallelBlock<T>::reduce_norm(std::move(gr.params)));  // Partial → R
      else fgp.emplace(std::move(gr.params));
    }
    const X* dy = &*fdx;
    for (std::size_t l = nlayers; l-- > 0;) {
      say("backward block " + std::to_string(l) + "/" + std::to_string(nlayers));
      const std::string key = "block" + std::to_string(l);
      auto s = ledger.scope(key);
      EventLog::Phase ph(log, "backward block " + std::to_string(l), "backward", "bwd/" + key);
      dys[l].emplace(*dy);
      auto gr = blocks[l].backward(bf[l].cache, *dy);
      bdx[l].emplace(std::move(gr.dx));
      if constexpr (SP) bgp[l].emplace(blocks[l].reduce_grads(std::move(gr.params)));  // the norms: Partial → R
      else bgp[l].emplace(std::move(gr.params));
      dy = &*bdx[l];
    }
    {
      auto s = ledger.scope("embed");
      EventLog::Phase ph(log, "backward embedding (+ tied head gradient)", "backward", "bwd/embed");
      const X dx0 = drop_emb.backward(*dy);
      if constexpr (SP) eg.emplace(emb->backward_sp(ef->cache, dx0));
      else eg.emplace(emb->backward(ef->cache, dx0));
      dE.emplace(eg->de + hg->params.de);
    }
  }
  raw.barrier();
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step0).count();

  // ---- the dense reference (rank 0) ------------------------------------------------------------
  std::optional<DenseRun> dr;
  double dense_seconds = 0;
  if (root) {
    say("dense reference (reference/dense_layers.hpp)", true);
    EventLog::Phase ph(log, "dense reference (reference/dense_layers.hpp gpt_forward/gpt_backward)", "reference");
    const auto t0 = Clock::now();
    dr.emplace(dense_run(dm));
    dense_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // ---- rows ------------------------------------------------------------------------------------
  std::vector<Row> rows;
  const double tol = o.tolerance();
  rows.emplace_back("embedding", "embed", std::vector<std::string>{"embed"}, tol);
  for (std::size_t l = 0; l < nlayers; ++l)
    rows.emplace_back("block " + std::to_string(l), "block" + std::to_string(l),
                      std::vector<std::string>{"block" + std::to_string(l)}, tol);
  rows.emplace_back("final norm", "final_norm", std::vector<std::string>{"final_norm"}, tol);
  rows.emplace_back("LM head + loss", "head", std::vector<std::string>{"head", "loss"}, tol);

  // ---- checks (every rank gathers, rank 0 compares) ----------------------------------------------
  say("comparing with the dense reference", true);
  const int pp = p;
  auto add = [&](Row& row, const std::string& name, const auto& x, auto expected) {
    auto d = to_dense(x);
    if (!root) return;
    const M exp = expected();
    row.add(name, d, exp);  // padded: the padding must be exactly zero (a second check)
  };
  auto bit_check = [&](Row& row, const std::string& name, bool agree) {
    if (root) row.add(verify::check_flag(name, agree));
  };
  {
    EventLog::Phase ph(log, "gather + compare", "verification");
    const DenseRun* R = dr ? &*dr : nullptr;
    Row& er = rows.front();
    add(er, "y (after dropout)", *x0, [&] { return R->out.x0; });
    add(er, "dE (lookup + tied head)", *dE, [&] { return R->grads.demb; });
    const Index d = o.hidden / o.heads, G = o.num_groups();
    const bool glu = o.activation() == nn::Activation::swiglu, center = o.norm_kind() == nn::NormKind::layer;
    for (std::size_t l = 0; l < nlayers; ++l) {
      Row& row = rows[l + 1];
      const auto& gp = *bgp[l];
      const auto& rg = R ? R->grads.blocks[l] : ref::BlockGrads{};
      add(row, "y", bf[l].y, [&] { return R->out.blocks[l].y; });
      add(row, "dx", *bdx[l], [&] { return rg.dx; });
      add(row, "ln1.dgamma", gp.ln1.dgamma, [&] { return rg.ln1.dgamma; });
      if (center) add(row, "ln1.dbeta", *gp.ln1.dbeta, [&] { return rg.ln1.dbeta; });
      add(row, "attn.dWqkv", gp.attn.qkv.dw, [&] { return qkv_physical(rg.attn.dwq, rg.attn.dwk, rg.attn.dwv, o.heads, G, d, pp); });
      if (!o.no_bias)
        add(row, "attn.dbqkv", *gp.attn.qkv.db, [&] { return qkv_physical(rg.attn.dbq, rg.attn.dbk, rg.attn.dbv, o.heads, G, d, pp); });
      add(row, "attn.dWo", gp.attn.proj.dw, [&] { return rg.attn.dwo; });
      if (!o.no_bias) add(row, "attn.dbo", *gp.attn.proj.db, [&] { return rg.attn.dbo; });
      add(row, "ln2.dgamma", gp.ln2.dgamma, [&] { return rg.ln2.dgamma; });
      if (center) add(row, "ln2.dbeta", *gp.ln2.dbeta, [&] { return rg.ln2.dbeta; });
      add(row, "mlp.dW1", gp.mlp.fc1.dw, [&] { return glu ? swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, pp) : rg.mlp.dw1; });
      if (!o.no_bias)
        add(row, "mlp.db1", *gp.mlp.fc1.db, [&] { return glu ? swiglu_physical(rg.mlp.db1, rg.mlp.dbu, pp) : rg.mlp.db1; });
      add(row, "mlp.dW2", gp.mlp.fc2.dw, [&] { return rg.mlp.dw2; });
      if (!o.no_bias) add(row, "mlp.db2", *gp.mlp.fc2.db, [&] { return rg.mlp.db2; });
      if constexpr (!SP) bit_check(row, "y, dx replicas bit-identical", replicas_agree(bf[l].y) && replicas_agree(*bdx[l]));
      else bit_check(row, "dγ replicas bit-identical (after reduce_grads)", replicas_agree(gp.ln1.dgamma) && replicas_agree(gp.ln2.dgamma));
    }
    Row& fr = rows[nlayers + 1];
    add(fr, "y", ff->y, [&] { return R->out.fn.y; });
    add(fr, "dx", *fdx, [&] { return R->grads.fn.dx; });
    add(fr, "dgamma", fgp->dgamma, [&] { return R->grads.fn.dgamma; });
    if (center) add(fr, "dbeta", *fgp->dbeta, [&] { return R->grads.fn.dbeta; });
    Row& hr = rows.back();
    add(hr, "logits", hf->logits, [&] { return R->out.logits; });
    add(hr, "per-token loss", lf->losses, [&] { return M(R->out.loss); });
    if (root) hr.add(verify::check_scalar("mean loss", static_cast<double>(lf->mean), R->out.mean, tol));
    add(hr, "dlogits", *dlogits, [&] { return R->out.dlogits; });
    add(hr, "dx (into the final norm)", hg->dx, [&] { return R->dyf; });
  }

  // ---- --dump: every rank's blocks, the dense twin's tensors, the layout map (dump.hpp) ----------
  if (!o.dump.empty()) {
    say("--dump: writing " + o.dump, true);
    Dumper dump(true, root, std::is_same_v<T, double>);
    const DenseRun* R = dr ? &*dr : nullptr;
    const bool glu = o.activation() == nn::Activation::swiglu, center = o.norm_kind() == nn::NormKind::layer;
    dump.add("embedding.output", *x0, [&] { return R->out.x0; });
    for (std::size_t l = 0; l < nlayers; ++l)
      dump.add("decoder.layers." + std::to_string(l) + ".output", bf[l].y, [&] { return R->out.blocks[l].y; });
    dump.add("final_layernorm.output", ff->y, [&] { return R->out.fn.y; });
    dump.scalar("loss", static_cast<double>(lf->mean), R ? R->out.mean : 0.0);
    // the gradients in the order the backward produces them
    dump.add("final_layernorm.weight.grad", fgp->dgamma, [&] { return R->grads.fn.dgamma; });
    if (center) dump.add("final_layernorm.bias.grad", *fgp->dbeta, [&] { return R->grads.fn.dbeta; });
    for (std::size_t l = nlayers; l-- > 0;) {
      const std::string at = "decoder.layers." + std::to_string(l) + ".";
      const auto& gp = *bgp[l];
      auto rg = [&]() -> const ref::BlockGrads& { return R->grads.blocks[l]; };
      dump.add(at + "mlp.linear_fc2.weight.grad", gp.mlp.fc2.dw, [&] { return rg().mlp.dw2; });
      if (!o.no_bias) dump.add(at + "mlp.linear_fc2.bias.grad", *gp.mlp.fc2.db, [&] { return rg().mlp.db2; });
      if (!glu) dump.add(at + "mlp.linear_fc1.weight.grad", gp.mlp.fc1.dw, [&] { return rg().mlp.dw1; });
      if (!glu && !o.no_bias) dump.add(at + "mlp.linear_fc1.bias.grad", *gp.mlp.fc1.db, [&] { return rg().mlp.db1; });
      dump.add(at + "pre_mlp_layernorm.weight.grad", gp.ln2.dgamma, [&] { return rg().ln2.dgamma; });
      if (center) dump.add(at + "pre_mlp_layernorm.bias.grad", *gp.ln2.dbeta, [&] { return rg().ln2.dbeta; });
      dump.add(at + "self_attention.linear_proj.weight.grad", gp.attn.proj.dw, [&] { return rg().attn.dwo; });
      if (!o.no_bias) dump.add(at + "self_attention.linear_proj.bias.grad", *gp.attn.proj.db, [&] { return rg().attn.dbo; });
      dump.add(at + "input_layernorm.weight.grad", gp.ln1.dgamma, [&] { return rg().ln1.dgamma; });
      if (center) dump.add(at + "input_layernorm.bias.grad", *gp.ln1.dbeta, [&] { return rg().ln1.dbeta; });
      dump.add(at + "input.grad", *bdx[l], [&] { return rg().dx; });
    }
    dump.add("embedding.word_embeddings.weight.grad", *dE, [&] { return R->grads.demb; });
    dump.write(o.dump, rank, p);
  }

  // ---- nn::Gpt, the model class, on the same masters: loss and every gradient ------------------
  Row gr("nn::Gpt (whole)", "gpt", {}, tol);
  {
    say("nn::Gpt: forward_backward", true);
    const nn::GptConfig gc = gpt_config(o, SP);
    const auto masters = to_masters(o, dm.g);
    auto model = nn::Gpt<T>::from_masters(gc, masters, g);
    model.check_finite(true);  // a NaN or Inf names its layer and rank (issue 14)
    T loss{};
    {
      auto s = ledger.scope("gpt");
      EventLog::Phase ph(log, "nn::Gpt forward_backward", "gpt");
      loss = model.forward_backward(dm.ids, dm.targets);
    }
    const auto grads = model.grad_masters();
    if (root) {
      gr.add(verify::check_scalar("mean loss", static_cast<double>(loss), dr->out.mean, tol));
      // One check per parameter tensor as the model stores it: the fused Q|K|V weight and bias and
      // SwiGLU's gate|up are one tensor each (normwise over the whole tensor, as in the layer rows).
      // Taken part by part, the K bias would be compared alone — and its exact gradient is 0 (a
      // shift of every key by bk adds q·bk to a whole row of scores, which softmax ignores), so
      // its relative error would be rounding noise over rounding noise.
      const auto expect = fuse_parts(grad_masters(o, dr->grads));
      const auto got = fuse_parts(grads);
      for (const auto& [name, m] : expect) {
        auto it = got.find(name);
        verify::Check ck{"d " + name, {}, false};
        if (it == got.end()) ck.err.max_rel = ck.err.max_abs = std::numeric_limits<double>::infinity();
        else ck.err = compare(it->second, m);
        ck.pass = ck.err.within(tol);
        gr.checks.push_back(ck);
      }
      bit_check(gr, "dropout seed = Gpt::dropout_seed()", model.dropout_seed() == drop_seed(o));
    }
  }

  // ---- --explain: block 0, traced ----------------------------------------------------------------
  std::optional<ExplainResult> explain;
  if (o.explain) {
    say("explain: tracing block 0", true);
    EventLog::Phase ph(log, "explain: block 0 re-executed", "explain");
    const Dims dims{Tk, h, o.heads, o.num_groups(), o.hidden / o.heads, o.ffn_size(), o.vocab, emb->padded_vocab_size(), p, !o.no_bias};
    explain = explain_block<T, SP>(blocks[0], *x0, *dys[0], bf[0], *bdx[0], *bgp[0], ledger, dims, "block0");
  }

  // ---- memory (each rank, measured from its tensors) -----------------------------------------------
  std::vector<double> mem;
  {
    mem.insert(mem.end(), {double(nbytes(emb->weight())), double(nbytes(*dE)), double(nbytes(ef->cache.ids))});
    for (std::size_t l = 0; l < nlayers; ++l) {
      const auto& b = blocks[l];
      const auto& gp = *bgp[l];
      const auto& c = bf[l].cache;
      const double par = double(sum_bytes(b.ln1().gamma(), b.ln1().beta(), b.attention().qkv().weight(),
                                          b.attention().qkv().bias(), b.attention().proj().weight(),
                                          b.attention().proj().bias(), b.ln2().gamma(), b.ln2().beta(),
                                          b.mlp().fc1().weight(), b.mlp().fc1().bias(), b.mlp().fc2().weight(),
                                          b.mlp().fc2().bias()));
      const double grd = double(sum_bytes(gp.ln1.dgamma, gp.ln1.dbeta, gp.attn.qkv.dw, gp.attn.qkv.db, gp.attn.proj.dw,
                                          gp.attn.proj.db, gp.ln2.dgamma, gp.ln2.dbeta, gp.mlp.fc1.dw, gp.mlp.fc1.db,
                                          gp.mlp.fc2.dw, gp.mlp.fc2.db));
      const double act = double(sum_bytes(c.ln1.xhat, c.ln1.rstd, c.attn.qkv_in.x, c.attn.qkv, c.attn.probs,
                                          c.attn.proj.h, c.ln2.xhat, c.ln2.rstd, c.mlp.fc1.x, c.mlp.h, c.mlp.fc2.h, c.input));
      mem.insert(mem.end(), {par, grd, act});
    }
    mem.insert(mem.end(), {double(sum_bytes(lnf->gamma(), lnf->beta())), double(sum_bytes(fgp->dgamma, fgp->dbeta)),
                           double(sum_bytes(ff->cache.xhat, ff->cache.rstd))});
    const auto& lc = lf->cache;
    mem.insert(mem.end(), {0.0, 0.0, double(sum_bytes(hf->cache.x, lc.probs, lc.targets, lc.active))});
  }

  // ---- per-row phase times and collective times, from every rank ---------------------------------
  const auto& entries = ledger.entries();
  std::vector<double> phases;
  for (const auto& row : rows) {
    double f = 0, b = 0;
    for (const auto& sc : row.scopes) f += log.phase_seconds["fwd/" + sc], b += log.phase_seconds["bwd/" + sc];
    phases.push_back(f);
    phases.push_back(b);
  }
  const auto all_mem = verify::gather_doubles(raw, mem);
  const auto all_coll = verify::gather_doubles(raw, log.coll_seconds);
  const auto all_phase = verify::gather_doubles(raw, phases);

  // ---- the trace: every rank's events ----------------------------------------------------------------
  std::vector<std::string> all_events;
  if (!o.trace.empty()) all_events = verify::gather_strings(raw, trace_events_json(rank, log));

  if (!root) return;

  // ---- assemble the rows (rank 0) -------------------------------------------------------------------
  const Gathered gathered{all_coll, all_phase, all_mem, log.coll_seconds.size(), phases.size(), mem.size()};
  assemble_rows(rows, gr, o, p, SP, sizeof(T), entries, cal, gathered);

  out->rows = std::move(rows);
  out->ledger.assign(entries.begin(), entries.end());
  out->cal = cal;
  out->explain = std::move(explain);
  out->loss = static_cast<double>(lf->mean);
  out->loss_ref = dr->out.mean;
  out->dense = std::move(*dr);
  out->step_seconds = step_seconds;
  out->dense_seconds = dense_seconds;
  out->trace_events = std::move(all_events);
}

}  // namespace sv
