// tools/verify/precision.cpp — `--dtype bf16 | fp16` (and `--dtype float --bounds`): each block of
// the model run alone in the program's element type E at TP p, fed the dense run's input X_l and
// output gradient dY_l rounded to E, against the block's dense twin evaluated over
// precision::Running: for every output and gradient, error ÷ the bound derived from E's
// rounding (docs/verify.md, "Through a layer: the running bound"). Pass: ≤ 1 everywhere.
//
// A block at a time, as TTrace does: the bound is worst-case per element, so it grows with every
// layer it is carried through; each block fed the twin's inputs keeps it at the size of one block.
#include "precision.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model.hpp"
#include "shardalg/comm/thread_world.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/precision/bounds.hpp"
#include "shardalg/precision/running.hpp"

namespace sv {
namespace {

namespace pr = shardalg::precision;
using R = pr::Running<pr::Format::f32>;  // fp32 arithmetic; the storage format comes from the scope
using RM = ::ref::Mat<R>;

/// v rounded to E (through float: every E here is float or narrower).
template <class E>
double to_e(double v) {
  return static_cast<double>(static_cast<float>(E(static_cast<float>(v))));
}
template <class E>
M round_e(const M& m) {
  return m.unaryExpr([](double v) { return to_e<E>(v); });
}
template <class E, class L>
M dense_of(const Sharded<E, L>& x) {
  return CpuBackend::to_host(to_dense(x)).unaryExpr([](const E& v) { return static_cast<double>(static_cast<float>(v)); });
}

/// One block at TP p on threads: its output and gradients, dense, by name (rank 0's copy; every
/// rank's replicated values are the same bits, and to_dense gathers the sharded ones).
template <class E>
std::map<std::string, M> run_block(const Options& o, int l, const ::ref::Block& rb, const M& x, const M& dy, int p) {
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu;
  std::vector<std::map<std::string, M>> out(static_cast<std::size_t>(p));
  run_ranks(p, [&](ThreadComm& c) {
    const Group g(c);
    const auto nb = [&](const M& m) -> const M* { return o.no_bias ? nullptr : &m; };
    const nn::BlockMasters<M> m{&rb.ln1.gamma, center ? &rb.ln1.beta : nullptr,
                                {&rb.attn.wq, nb(rb.attn.bq), &rb.attn.wk, nb(rb.attn.bk), &rb.attn.wv, nb(rb.attn.bv),
                                 &rb.attn.wo, nb(rb.attn.bo)},
                                &rb.ln2.gamma, center ? &rb.ln2.beta : nullptr,
                                {&rb.mlp.w1, nb(rb.mlp.b1), glu ? &rb.mlp.wu : nullptr, glu ? nb(rb.mlp.bu) : nullptr,
                                 &rb.mlp.w2, nb(rb.mlp.b2)}};
    const auto blk = nn::TransformerBlock<E>::from_dense(block_config(o, l), m, g);
    const auto shard = [&](const M& v) {
      return nn::from_global<E, Replicated, CpuBackend>(v.rows(), v.cols(), g, [&](Index i, Index j) { return v(i, j); });
    };
    const auto f = blk.forward(shard(x));
    const auto gr = blk.backward(f.cache, shard(dy));
    std::map<std::string, M> r{{"y", dense_of(f.y)},
                               {"dx", dense_of(gr.dx)},
                               {"ln1.dgamma", dense_of(gr.params.ln1.dgamma)},
                               {"ln2.dgamma", dense_of(gr.params.ln2.dgamma)},
                               {"attn.proj.dw", dense_of(gr.params.attn.proj.dw)},
                               {"mlp.fc2.dw", dense_of(gr.params.mlp.fc2.dw)}};
    if (!glu) r["mlp.fc1.dw"] = dense_of(gr.params.mlp.fc1.dw);  // SwiGLU's fused fc1 is physical: not compared
    if (!o.no_bias) r["mlp.fc2.db"] = dense_of(*gr.params.mlp.fc2.db);
    out[static_cast<std::size_t>(c.rank())] = std::move(r);
  });
  return out[0];
}

/// The twin's value and bound of each tensor run_block reports.
std::map<std::string, const RM*> twin_tensors(const Options& o, const ::ref::BlockOutOf<R>& fo, const ::ref::BlockGradsOf<R>& go) {
  std::map<std::string, const RM*> t{{"y", &fo.y},
                                     {"dx", &go.dx},
                                     {"ln1.dgamma", &go.ln1.dgamma},
                                     {"ln2.dgamma", &go.ln2.dgamma},
                                     {"attn.proj.dw", &go.attn.dwo},
                                     {"mlp.fc2.dw", &go.mlp.dw2}};
  if (o.activation() != nn::Activation::swiglu) t["mlp.fc1.dw"] = &go.mlp.dw1;
  if (!o.no_bias) t["mlp.fc2.db"] = &go.mlp.db2;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

template <class E>
std::vector<BoundRow> check_blocks(const Options& o, int p) {
  const DenseModel dm = make_model(o);
  const DenseRun dr = dense_run(dm);
  const pr::Storage storage =
      std::is_same_v<E, float> ? pr::Storage{std::nullopt, p} : pr::Storage{pr::format_of<E>, p};
  const pr::StorageScope scope(storage);  // the twin rounds where a program of E at TP p stores
  std::vector<BoundRow> rows;
  const std::size_t L = dm.g.blocks.size();
  for (std::size_t l = 0; l < L; ++l) {
    const ::ref::Block& b = dm.g.blocks[l];
    const M x = round_e<E>(l == 0 ? dr.out.x0 : dr.out.blocks[l - 1].y);
    const M dy = round_e<E>(l + 1 < L ? dr.grads.blocks[l + 1].dx : dr.grads.fn.dx);
    const std::string layer = fmt::format("block {}", l);
    const auto got = run_block<E>(o, static_cast<int>(l), b, x, dy, p);
    try {
      const ::ref::BlockOf<R> rb{::ref::cast<R>(b.ln1), ::ref::cast<R>(b.attn), ::ref::cast<R>(b.ln2), ::ref::cast<R>(b.mlp),
                                 b.p, b.seed, b.drop_attn, b.drop_mlp};
      const RM rx = ::ref::cast<R>(x);
      const auto fo = ::ref::block_forward(rb, rx);
      const auto go = ::ref::block_backward(rb, rx, fo, ::ref::cast<R>(dy));
      for (const auto& [name, twin] : twin_tensors(o, fo, go)) {
        const M ratios = pr::error_ratios(got.at(name), pr::values(*twin), pr::bounds(*twin));
        std::vector<double> v(ratios.data(), ratios.data() + ratios.size());
        rows.push_back({layer, name, static_cast<Index>(v.size()), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()),
                        median(v), ""});
      }
    } catch (const pr::PrecisionError& e) {  // the bound itself became vacuous: no verdict on this block
      rows.push_back({layer, "(bound)", 0, 0.0, 0.0, e.what()});
    }
  }
  return rows;
}

}  // namespace

std::vector<BoundRow> bound_rows(const Options& o, int p) {
  if (o.dtype == "bf16") return check_blocks<Eigen::bfloat16>(o, p);
  if (o.dtype == "fp16") return check_blocks<Eigen::half>(o, p);
  return check_blocks<float>(o, p);
}

int run_bounds(const Options& o, int p) {
  const std::vector<BoundRow> rows = bound_rows(o, p);
  bool pass = !rows.empty();
  double worst = 0;
  for (const auto& r : rows) {
    pass = pass && r.pass();
    worst = std::max(worst, r.max_ratio);
  }
  const std::string storage = o.dtype == "float" ? "fp32 storage" : fmt::format("{} storage", o.dtype);
  if (o.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& r : rows)
      layers.push_back({{"layer", r.layer}, {"tensor", r.tensor}, {"elements", r.elements}, {"max_error_over_bound", r.max_ratio},
                        {"median_error_over_bound", r.median_ratio}, {"pass", r.pass()}, {"note", r.note}});
    const nlohmann::json j{{"mode", "bounds"},
                           {"config", {{"tp", p}, {"dtype", o.dtype}, {"layers", o.layers}, {"hidden", o.hidden},
                                       {"heads", o.heads}, {"seq", o.seq}, {"batch", o.batch}, {"seed", o.seed},
                                       {"dropout", o.dropout}, {"act", o.act}, {"norm", o.norm}}},
                           {"layers", layers},
                           {"summary", {{"pass", pass}, {"max_error_over_bound", worst}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("shardalg-verify: rounding bounds, {} with fp32 arithmetic, TP {} on threads\n", storage, p);
    fmt::print("model    {} blocks, hidden {}, {} heads, seq {} × batch {}, {}, {}, dropout {:g}, seed {}\n", o.layers,
               o.hidden, o.heads, o.seq, o.batch, o.act, o.norm, o.dropout, o.seed);
    fmt::print("method   each block alone, fed the dense run's input and output gradient rounded to {}, against its\n"
               "         dense twin over precision::Running (the bound per element); pass: error ÷ bound ≤ 1\n\n",
               o.dtype);
    fmt::print("{:<9} {:<14} {:>9} {:>16} {:>9}  {}\n", "layer", "tensor", "elements", "max error÷bound", "median", "");
    for (const auto& r : rows) {
      if (!r.note.empty()) {
        fmt::print("{:<9} {:<14} the bound is vacuous: {}  FAIL\n", r.layer, r.tensor, r.note);
        continue;
      }
      fmt::print("{:<9} {:<14} {:>9} {:>16.3g} {:>9.3g}  {}\n", r.layer, r.tensor, r.elements, r.max_ratio, r.median_ratio,
                 r.pass() ? "ok" : "FAIL");
    }
    fmt::print("\n{}: largest error ÷ bound {:.3g}\n", pass ? "PASS" : "FAIL", worst);
  }
  return pass ? 0 : 1;
}

}  // namespace sv
