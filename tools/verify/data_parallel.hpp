// tools/verify/data_parallel.hpp — `--dp D`: the GPT on a dp × tp mesh (nn::DataParallelGpt),
// one step on the global batch, against the dense reference of the whole batch; its data-parallel
// collectives beside the analytic ones; with `--zero`, the sharded optimizer's step and the bytes
// of its moments beside the formula.
//
//   forward_backward   dp: all_reduce of 1 value (the global mean loss)            scope dp.loss
//   reduce             dp: one all_reduce per gradient bucket, Ψ values in all      scope dp.grads
//   --zero step        dp: one reduce_scatter and one all_gather per bucket (each padded to a
//                      multiple of D), one all_reduce of 2 values (the gradient norm's parts)
//   --zero 2           the reduce_scatters move into forward_backward (during the backward); the
//                      step keeps the all_gathers and the norm's all_reduce; the gradient slices
//                      held after the backward are e·Σ⌈n_b/D⌉, and the most held during it is below
//                      the whole e·Ψ
//   --zero 3           the parameters are held as slices W_b[dp:C] between steps, in buckets that
//                      never span two units (the embedding, each block, the final norm):
//                      forward_backward all_gathers each block's buckets before its forward and again
//                      before its backward, the embedding's and the final norm's once (padded), and
//                      reduce-scatters the gradients in the backward; the step has only the norm's
//                      all_reduce. The parameter bytes held after the step are e·Σ⌈n_b/D⌉ (the
//                      whole replica: e·Ψ); the most held during forward_backward is at most the
//                      slices, the embedding, the final norm, two adjacent blocks (prefetch) and one
//                      bucket; the gradients are checked on a second ZeRO-3 model (its slices
//                      gathered back over dp, then over tp: not counted)
//
// With --cp C the mesh is dp × cp × tp: the data group is dp × cp (D·C ranks: the same counts,
// padded to D·C), and a second row holds attention's traffic on cp beside its count: per layer,
// ring: forward C − 1 K|V sends (and receives), backward C − 1 K|V and C dK|dV; a2a: forward 2
// all_to_alls (Q|K|V, O), backward 2 (dO, dQ|dK|dV).
//
// Ψ, the parameter values one tensor-parallel rank holds, and the bucket count come from the
// configuration here (shapes and layouts), not from the model: a model that moved other bytes, or
// packed its buckets differently, fails the row.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model.hpp"
#include "options.hpp"
#include "result.hpp"
#include "shardalg/mesh/mesh.hpp"
#include "shardalg/nn/layers/attention.hpp"
#include "shardalg/nn/models/data_parallel.hpp"
#include "shardalg/verify/verify.hpp"

namespace sv {

/// The local values of one parameter on a tensor-parallel rank of `p`, from its name: column-
/// parallel tensors (QKV, fc1: weight and bias) hold out/p columns, row-parallel weights (proj,
/// fc2) and the embedding in/p rows, everything else (norms, the row-parallel biases) all of it.
inline Index expected_local_elements(const std::string& name, const Options& o, int p) {
  const Index h = o.hidden, d = o.hidden / o.heads, f = o.ffn_size();
  const bool glu = o.activation() == nn::Activation::swiglu;
  const nn::QkvLayout qkv{o.heads, o.num_groups(), d, p};  // GQA: replicated K/V copies widen a rank's block
  auto ends = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  if (name == "embedding.weight") return nn::padded_vocab(o.vocab, o.vocab_divisor, p) / p * h;
  if (ends("attn.qkv.weight")) return h * qkv.rank_width();
  if (ends("attn.qkv.bias")) return qkv.rank_width();
  if (ends("attn.proj.weight")) return h / p * h;
  if (ends("mlp.fc1.weight")) return h * (glu ? 2 : 1) * f / p;
  if (ends("mlp.fc1.bias")) return (glu ? 2 : 1) * f / p;
  if (ends("mlp.fc2.weight")) return f / p * h;
  return h;  // norms' γ and β, attn.proj.bias, mlp.fc2.bias: [1, h] on every rank
}

/// A parameter's unit by its name (ZeRO-3's gathers, restated): 0 the embedding, k + 1 "layers.k.…",
/// L + 1 the final norm.
inline std::size_t expected_unit(const std::string& name, int layers) {
  if (name.rfind("final_norm", 0) == 0) return static_cast<std::size_t>(layers) + 1;
  if (name.rfind("layers.", 0) == 0) return std::stoul(name.substr(7)) + 1;
  return 0;
}

/// The bucket sizes of the greedy packing (nn/optim/grad_buckets.hpp's rule, restated): from the last
/// parameter of `sizes` (visit order) back, a parameter that does not fit the open bucket starts a
/// new one, and so does one of another unit when `units` is given (ZeRO-3); 0 elements: one per
/// parameter. `bucket_of`, when given, gets each parameter's bucket (in visit order);
/// `bucket_unit` each bucket's unit.
inline std::vector<Index> expected_buckets(const std::vector<Index>& sizes, std::size_t cap,
                                           std::vector<std::size_t>* bucket_of = nullptr,
                                           const std::vector<std::size_t>* units = nullptr,
                                           std::vector<std::size_t>* bucket_unit = nullptr) {
  std::vector<Index> b;
  std::vector<std::size_t> bu;
  if (bucket_of) bucket_of->assign(sizes.size(), 0);
  for (std::size_t i = sizes.size(); i-- > 0;) {
    const Index n = sizes[i];
    const std::size_t u = units ? (*units)[i] : 0;
    if (b.empty() || cap == 0 || static_cast<std::size_t>(b.back() + n) > cap || bu.back() != u) {
      b.push_back(0);
      bu.push_back(u);
    }
    b.back() += n;
    if (bucket_of) (*bucket_of)[i] = b.size() - 1;
  }
  if (bucket_unit) *bucket_unit = std::move(bu);
  return b;
}

/// --cp: attention's messages on the cp axis beside their count from the configuration.
template <class T>
void cp_row(const Ledger& ledger, const Options& o, int D, int C, int P, Row* out) {
  const std::size_t e = sizeof(T);
  const Index rows = o.batch / D * o.seq / C, d = o.hidden / o.heads;
  const nn::QkvLayout lay{o.heads, o.num_groups(), d, P};
  const Index hq = lay.units() * lay.q_per_unit(), g = lay.units();  // this rank's query and K/V heads
  Row row(fmt::format("CP={} attn {}", C, o.cp_algo), "cp", {}, o.tolerance());
  const auto on_cp = [](const LedgerEntry& en) { return en.axis == "cp"; };
  std::vector<LedgerEntry> f, b;
  for (const auto& en : ledger.entries())
    if (on_cp(en)) (en.scope.find("bwd") != std::string::npos ? b : f).push_back(en);
  row.ledger_fwd = verify::tally(f, "");
  row.ledger_bwd = verify::tally(b, "");
  for (int l = 0; l < o.layers; ++l) {
    if (o.cp_algo == "ring") {
      const auto kv = static_cast<std::size_t>(rows * 2 * g * d) * e;  // K|V (and dK|dV): the block's rows × 2·G·d
      row.analytic_fwd.add(CollectiveKind::send, kv, static_cast<std::size_t>(C - 1));
      row.analytic_fwd.add(CollectiveKind::recv, kv, static_cast<std::size_t>(C - 1));
      row.analytic_bwd.add(CollectiveKind::send, kv, static_cast<std::size_t>(2 * C - 1));
      row.analytic_bwd.add(CollectiveKind::recv, kv, static_cast<std::size_t>(2 * C - 1));
    } else {  // tiles of rows × (heads/C)·d per destination, recorded as n · C · C elements
      const auto qkv = static_cast<std::size_t>(rows * (hq + 2 * g) / C * d * C * C) * e, o1 = static_cast<std::size_t>(rows * hq / C * d * C * C) * e;
      row.analytic_fwd.add(CollectiveKind::all_to_all, qkv);
      row.analytic_fwd.add(CollectiveKind::all_to_all, o1);
      row.analytic_bwd.add(CollectiveKind::all_to_all, o1);
      row.analytic_bwd.add(CollectiveKind::all_to_all, qkv);
    }
  }
  row.checks.push_back(verify::check_flag("attention's cp messages = the count from the configuration", row.ledger_fwd == row.analytic_fwd && row.ledger_bwd == row.analytic_bwd));
  *out = std::move(row);
}


/// Rank 0 of the world gets the row in `out`; every rank of the mesh must call.
template <class T, bool SP>
void run_dp(const Mesh& raw_mesh, const Options& o, const DenseModel& dm, const DenseRun* dense, Row* out,
            DpFigures* figures, Row* cp_out = nullptr) {
  const int CP = raw_mesh.has("cp") ? raw_mesh.size("cp") : 1, D = raw_mesh.size("dp") * CP, P = raw_mesh.size("tp");
  const std::size_t elem = sizeof(T);
  const double tol = o.tolerance();
  Ledger ledger;
  const Mesh mesh(ledgered(raw_mesh.world(), ledger), raw_mesh.axes());
  const nn::GptConfig gc = gpt_config(o, SP);  // gc.batch: the global batch
  typename nn::DataParallelGpt<T>::Options dpo;
  dpo.bucket_elements = o.bucket;
  dpo.cp_algo = o.cp_algo == "a2a" ? nn::CpAlgo::all_to_all : nn::CpAlgo::ring;
  dpo.shard_gradients = o.zero >= 2;
  dpo.shard_parameters = o.zero == 3;
  auto model = nn::DataParallelGpt<T>::init(gc, mesh, dpo);
  model.load(to_masters(o, dm.g));
  model.replica().check_finite(true);

  T loss{};
  model.replica().measure_activations(true);  // what this rank's replica keeps for its backward
  {
    auto s = ledger.scope("dp");
    loss = model.forward_backward(dm.ids, dm.targets);
  }
  const nn::ActivationTerms held = model.replica().held_activations();
  std::size_t replica_grad_bytes = 0;  // without ZeRO-2: the whole gradients the replica holds
  if (o.zero < 2)
    model.replica().visit([&](const nn::ParamInfo&, const auto&, const auto& g) {
      replica_grad_bytes += static_cast<std::size_t>(g.local().size()) * elem;
    });
  const std::size_t replica_param_bytes = model.parameter_bytes();  // ZeRO-3: the slices alone
  const std::size_t after_step = ledger.entries().size();
  std::size_t after_update = after_step;  // the step's entries end here (before masters(): ZeRO-3 gathers for it)
  std::size_t grad_slice_bytes = 0;
  for (const auto& g : model.gradient_slices()) grad_slice_bytes += static_cast<std::size_t>(g.size()) * sizeof(T);
  const std::size_t grad_peak_bytes = model.gradient_peak_bytes();
  nn::Masters grads;
  if (!o.zero) {
    auto s = ledger.scope("dp_reduce");
    grads = model.grad_masters();  // all_reduce<dp> per bucket, then a gather over tp (not counted)
    after_update = ledger.entries().size();
  }
  std::size_t adam_state_bytes = 0;  // --zero 0: Adam's moments after one step on the reduced gradients
  if (!o.zero) {
    nn::Adam<T> adam;
    model.step(adam, 1.0);
    for (const auto& [name, mo] : adam.state()) adam_state_bytes += static_cast<std::size_t>(mo.m.size() + mo.v.size()) * elem;
  } else if (o.zero == 3) {  // the gradients of a second ZeRO-3 model, on the unledgered mesh
    auto twin = nn::DataParallelGpt<T>::init(gc, raw_mesh, dpo);
    twin.load(to_masters(o, dm.g));
    twin.forward_backward(dm.ids, dm.targets);
    grads = twin.grad_masters();  // the slices all_gather<dp>'d, then gathered over tp
  }
  std::size_t param_bytes = 0, param_peak = 0;
  // --zero: one sharded-optimizer step, and the same step with Adam on one rank over the whole batch.
  std::optional<nn::Masters> zero_params, one_params;
  std::size_t state_bytes = 0;
  if (o.zero) {
    nn::ShardedAdam<T> zero;
    {
      auto s = ledger.scope("dp_reduce");
      model.step(zero, 1.0);
    }
    after_update = ledger.entries().size();
    state_bytes = zero.state_bytes();
    param_bytes = model.parameter_bytes();  // ZeRO-3: the slices alone; else the whole replica
    param_peak = model.parameter_peak_bytes();
    zero_params = model.masters();
    auto one = nn::Gpt<T>::from_masters(gc, to_masters(o, dm.g), Group(SelfComm{}));
    nn::Adam<T> adam;
    one.forward_backward(dm.ids, dm.targets);
    one.step(adam, 1.0);
    one_params = one.masters();
  }
  // forward_backward's time on the unledgered mesh, median of 3 after one warm-up (every rank), at
  // --recompute and, when that recomputes, without: the cost of recomputation on the same model.
  const auto time_fb = [&](const nn::GptConfig& c) {
    auto m = nn::DataParallelGpt<T>::init(c, raw_mesh, dpo);
    m.load(to_masters(o, dm.g));
    std::vector<double> t;
    for (int k = 0; k < 4; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      m.forward_backward(dm.ids, dm.targets);
      if (k) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[1];
  };
  const double fb_seconds = time_fb(gc);
  double fb_seconds_none = 0;
  if (gc.recompute != nn::Recompute::none) {
    nn::GptConfig none = gc;
    none.recompute = nn::Recompute::none;
    fb_seconds_none = time_fb(none);
  }
  const bool root = mesh.world().rank() == 0;
  if (!root) return;

  // Ψ and the buckets, from the configuration, in the model's visit order.
  const auto& plan = model.plan();
  std::vector<Index> sizes;
  std::vector<std::size_t> units;
  for (const auto& s : plan.slots) {
    sizes.push_back(expected_local_elements(s.name, o, P));
    units.push_back(expected_unit(s.name, o.layers));
  }
  std::vector<std::size_t> bucket_of, bucket_unit;
  const auto buckets = expected_buckets(sizes, o.bucket, &bucket_of, o.zero == 3 ? &units : nullptr, &bucket_unit);
  const auto is_block = [&](std::size_t u) { return u >= 1 && u <= static_cast<std::size_t>(o.layers); };
  Index psi = 0, padded = 0;
  for (Index b : buckets) psi += b, padded += (b + D - 1) / D * D;

  Row row(CP > 1 ? fmt::format("DP={} × CP={} Gpt{}", D / CP, CP, o.zero >= 2 ? fmt::format(" ZeRO-{}", o.zero) : o.zero ? " ZeRO" : "") : fmt_dp_name(D, P, o.zero), "dp", {}, tol);
  const auto dpe = [&](const LedgerEntry& e) { return e.axis == "dp"; };  // with cp: the dp × cp data group
  row.ledger_fwd = verify::tally_if(std::vector<LedgerEntry>(ledger.entries().begin(), ledger.entries().begin() + static_cast<std::ptrdiff_t>(after_step)), dpe);
  row.ledger_bwd = verify::tally_if(std::vector<LedgerEntry>(ledger.entries().begin() + static_cast<std::ptrdiff_t>(after_step), ledger.entries().begin() + static_cast<std::ptrdiff_t>(after_update)), dpe);
  row.analytic_fwd.add(CollectiveKind::all_reduce, elem);  // the loss: one value
  const auto n = buckets.size();
  if (!o.zero) {
    for (Index b : buckets) row.analytic_bwd.add(CollectiveKind::all_reduce, static_cast<std::size_t>(b) * elem);
  } else {
    for (std::size_t k = 0; k < n; ++k) {
      const auto pb = static_cast<std::size_t>((buckets[k] + D - 1) / D * D) * elem;
      (o.zero >= 2 ? row.analytic_fwd : row.analytic_bwd).add(CollectiveKind::reduce_scatter, pb);  // ZeRO-2, 3: in the backward
      if (o.zero == 3)  // a block's buckets before its forward and its backward; the embedding's and final norm's once
        row.analytic_fwd.add(CollectiveKind::all_gather, pb, is_block(bucket_unit[k]) ? 2 : 1);
      else
        row.analytic_bwd.add(CollectiveKind::all_gather, pb);  // ZeRO-1, 2: after the update
    }
    if (D > 1) row.analytic_bwd.add(CollectiveKind::all_reduce, 2 * sizeof(double));  // the norm's two parts
  }

  row.checks.push_back(verify::check_scalar("mean loss (global batch)", static_cast<double>(loss), dense->out.mean, tol));
  row.checks.push_back(verify::check_flag("Ψ = " + std::to_string(psi) + " local values in " + std::to_string(n) +
                                              " buckets, as packed by the model",
                                          plan.parameters() == psi && plan.buckets() == n));
  if (!o.zero || o.zero == 3) {
    const auto expect = fuse_parts(grad_masters(o, dense->grads));
    const auto got = fuse_parts(grads);
    for (const auto& [name, m] : expect) {
      verify::Check ck{"d " + name + (o.zero ? " (reduce_scatter<dp>)" : " (all_reduce<dp>)"), {}, false};
      auto it = got.find(name);
      if (it == got.end()) ck.err.max_rel = ck.err.max_abs = std::numeric_limits<double>::infinity();
      else ck.err = compare(it->second, m);
      ck.pass = ck.err.within(tol);
      row.checks.push_back(ck);
    }
  }
  DpFigures f;
  if (o.zero) {
    // One check over the whole model, normwise: a tensor whose gradient is rounding noise (the key
    // bias: softmax ignores a shift of a row) gets an Adam step of noise / noise, so a per-tensor
    // relative error would compare rounding with rounding.
    double num = 0, den = 0;
    bool all_there = true;
    for (const auto& [name, m] : *one_params) {
      auto it = zero_params->find(name);
      if (it == zero_params->end() || it->second.rows() != m.rows() || it->second.cols() != m.cols()) {
        all_there = false;
        continue;
      }
      num += (it->second.template cast<double>() - m.template cast<double>()).squaredNorm();
      den += m.template cast<double>().squaredNorm();
    }
    verify::Check ck{fmt::format("every parameter after one ZeRO-{} step (vs Adam on one rank, whole model)", o.zero), {}, false};
    ck.err.max_abs = std::sqrt(num);
    ck.err.max_rel = all_there ? verify::relative_error(ck.err.max_abs, std::sqrt(den)) : std::numeric_limits<double>::infinity();
    ck.pass = all_there && ck.err.max_rel <= tol;
    row.checks.push_back(ck);
    // The moments: 2 values per padded slot value, 1/D of them on this rank.
    const std::size_t formula = 2 * elem * static_cast<std::size_t>(padded / D);
    row.checks.push_back(verify::check_flag("ZeRO-1 moments held = 2·e·Σ⌈n_b/D⌉ = " + std::to_string(formula) + " B",
                                            state_bytes == formula));
    f.zero = true, f.state_bytes = state_bytes, f.formula_bytes = formula, f.adam_bytes = 2 * elem * static_cast<std::size_t>(psi);
    if (o.zero >= 2) {  // the gradients: 1/D of every padded bucket kept, never the whole Ψ held
      const std::size_t slices = elem * static_cast<std::size_t>(padded / D), whole = elem * static_cast<std::size_t>(psi);
      row.checks.push_back(verify::check_flag("ZeRO-2 gradient slices held = e·Σ⌈n_b/D⌉ = " + std::to_string(slices) + " B",
                                              grad_slice_bytes == slices));
      // During the backward a rank holds the slices of the buckets already reduced and the buckets
      // still filling. The backward hands a block's gradients over together (the final norm's, each
      // block's from the last, the embedding's last) and the buckets follow that order, so the
      // buckets open at once are at most those one block's parameters fall in.
      std::map<std::string, std::set<std::size_t>> touched;  // block (or lone parameter) → its buckets
      for (std::size_t k = 0; k < plan.slots.size(); ++k) {
        const std::string& nm = plan.slots[k].name;
        const auto dot = nm.rfind("layers.", 0) == 0 ? nm.find('.', 7) : std::string::npos;
        touched[dot == std::string::npos ? nm : nm.substr(0, dot)].insert(bucket_of[k]);
      }
      std::size_t open = 0;
      for (const auto& [unit, bs] : touched) {
        std::size_t sum = 0;
        for (std::size_t b : bs) sum += elem * static_cast<std::size_t>((buckets[b] + D - 1) / D * D);
        open = std::max(open, sum);
      }
      row.checks.push_back(verify::check_flag(
          fmt::format("ZeRO-2 gradient bytes held during the backward ({} B) <= the slices e·Σ⌈n_b/D⌉ ({} B) + the buckets one "
                      "block fills ({} B){}",
                      grad_peak_bytes, slices, open,
                      slices + open < whole ? fmt::format(", below the whole gradient e·Ψ = {} B", whole)
                                            : fmt::format(" (a bound not below the whole gradient e·Ψ = {} B at --bucket {})",
                                                          whole, o.bucket)),
          grad_peak_bytes <= slices + open));
      f.stage = 2, f.grad_peak_bytes = grad_peak_bytes, f.grad_slice_bytes = grad_slice_bytes, f.grad_slice_formula = slices;
      f.grad_whole_bytes = whole, f.grad_bound = slices + open;
    }
    if (o.zero == 3) {  // the parameters: 1/D of every padded bucket held between steps
      const std::size_t slices = elem * static_cast<std::size_t>(padded / D), whole = elem * static_cast<std::size_t>(psi);
      row.checks.push_back(verify::check_flag("ZeRO-3 parameters held after the step = e·Σ⌈n_b/D⌉ = " + std::to_string(slices) +
                                                  " B (whole replica e·Ψ = " + std::to_string(whole) + " B)",
                                              param_bytes == slices));
      // During forward_backward: the slices, the embedding and the final norm (held from their forward
      // to their gradient), two adjacent blocks (the one running and the next, prefetched) and one
      // bucket in flight.
      std::vector<std::size_t> unit_bytes(static_cast<std::size_t>(o.layers) + 2, 0);
      std::size_t biggest = 0;
      for (std::size_t k = 0; k < n; ++k) {
        unit_bytes[bucket_unit[k]] += elem * static_cast<std::size_t>(buckets[k]);
        biggest = std::max(biggest, elem * static_cast<std::size_t>((buckets[k] + D - 1) / D * D));
      }
      std::size_t two = 0;
      for (std::size_t u = 1; u <= static_cast<std::size_t>(o.layers); ++u)
        two = std::max(two, unit_bytes[u] + (u < static_cast<std::size_t>(o.layers) ? unit_bytes[u + 1] : 0));
      const std::size_t bound = slices + unit_bytes[0] + unit_bytes.back() + two + biggest;
      row.checks.push_back(verify::check_flag(
          fmt::format("ZeRO-3 parameter bytes held during forward_backward ({} B) <= slices + embedding + final norm + two "
                      "blocks + one bucket ({} B){}",
                      param_peak, bound, bound < slices + whole ? fmt::format(", below slices + the replica ({} B)", slices + whole) : ""),
          param_peak <= bound));
      f.param_peak_formula = bound;
      f.stage = 3, f.param_bytes = param_bytes, f.param_formula = slices, f.param_whole_bytes = whole, f.param_peak_bytes = param_peak;
    }
  }
  // The memory table: this rank's bytes per category, measured from the tensors held, beside the formula.
  {
    const double sl = double(elem) * double(padded / D), whole = double(elem) * double(psi);
    const bool z3 = o.zero == 3, z2 = o.zero >= 2;
    using M = DpFigures::Memory;
    f.memory.push_back(M{"parameters, between steps", z3 ? "e·Σ⌈n_b/D⌉ (ZeRO-3)" : "e·Ψ", double(z3 ? param_bytes : replica_param_bytes),
                         z3 ? sl : whole, false});
    if (z3) f.memory.push_back(M{"parameters, most in forward_backward", "slices + embedding + final norm + 2 blocks + 1 bucket",
                                 double(f.param_peak_bytes), double(f.param_peak_formula), true});
    f.memory.push_back(M{"gradients, after the backward", z2 ? "e·Σ⌈n_b/D⌉ (ZeRO-2)" : "e·Ψ",
                         double(z2 ? grad_slice_bytes : replica_grad_bytes), z2 ? sl : whole, false});
    if (z2) f.memory.push_back(M{"gradients, most in the backward", "slices + the buckets one block fills", double(f.grad_peak_bytes),
                                 double(f.grad_bound), true});
    f.memory.push_back(M{"optimizer state (Adam m, v)", o.zero ? "2e·Σ⌈n_b/D⌉ (ZeRO-1)" : "2e·Ψ",
                         double(o.zero ? state_bytes : adam_state_bytes), o.zero ? 2 * sl : 2 * whole, false});
    // Activations of the L blocks on this replica (its batch rows, this tp rank's heads): the
    // library's exact terms (nn/train/measured_memory.hpp) and Korthikanti's at 2 B a value.
    nn::GptConfig lc = gc;
    lc.batch = block_size(gc.batch, raw_mesh.size("dp"), raw_mesh.group("dp").rank());
    const bool cp = CP > 1;  // neither formula has context parallelism's terms
    const cost::TransformerShape shape{lc.batch, lc.seq, lc.hidden, lc.heads, lc.ffn_size(), lc.layers};
    f.memory.push_back(M{"activations of the blocks", cp ? "none (no cp terms)" : "the library's terms (measured_memory.hpp)",
                         held.layers(), cp ? 0.0 : nn::expected_activations(lc, P, elem).layers(), false});
    f.memory.push_back(M{"activations of the blocks", cp ? "none (no cp terms)" : fmt::format("Korthikanti, recompute {}, 2 B a value", o.recompute),
                         held.layers(), cp ? 0.0 : double(lc.layers) * cost::activation_bytes_per_layer(shape, P, SP, lc.recompute), false});
    f.fb_seconds = fb_seconds, f.fb_seconds_none = fb_seconds_none;
  }
  if (figures) *figures = f;
  *out = std::move(row);
  if (CP > 1 && cp_out) cp_row<T>(ledger, o, D / CP, CP, P, cp_out);
}

}  // namespace sv
