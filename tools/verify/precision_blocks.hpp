// tools/verify/precision_blocks.hpp — the sub-layer bound checks of precision.cpp as templates
// of the element type E, so that each type compiles in a TU of its own (precision.cpp: float, bf16
// and fp16; precision_double.cpp: double).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <fmt/format.h>

#include "model.hpp"
#include "precision.hpp"
#include "shardalg/comm/thread_world.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/precision/bounds.hpp"
#include "shardalg/precision/running.hpp"

namespace sv::blocks {


using namespace shardalg;
namespace pr = shardalg::precision;
/// The twin's scalar for a program of E: Running<f64> for double; Running<f32> for float and for
/// 16-bit storage (fp32 arithmetic; the storage format comes from the scope).
template <class E>
using RunningOf = pr::Running<std::is_same_v<E, double> ? pr::Format::f64 : pr::Format::f32>;
template <class E>
using RM = ::ref::Mat<RunningOf<E>>;

template <class E, class L>
M dense_of(const Sharded<E, L>& x) {
  if constexpr (std::is_same_v<E, double>) return CpuBackend::to_host(to_dense(x));
  else return CpuBackend::to_host(to_dense(x)).unaryExpr([](const E& v) { return static_cast<double>(static_cast<float>(v)); });
}

/// Named dense tensors of one sub-layer run.
using Named = std::map<std::string, M>;
/// Named twin tensors (value and bound), outputs first, in the order reported.
template <class E>
using Twins = std::vector<std::pair<std::string, RM<E>>>;

/// f(g) on p thread ranks; rank 0's result (the tensors are replicated, or gathered by to_dense on
/// every rank alike).
template <class F>
Named on_ranks(int p, F f) {
  std::vector<Named> out(static_cast<std::size_t>(p));
  run_ranks(p, [&](ThreadComm& c) { out[static_cast<std::size_t>(c.rank())] = f(Group(c)); });
  return out[0];
}

// L, the activations' layout between sub-layers: Replicated (tensor parallelism) or RowSharded
// (sequence parallelism). Only the helpers below depend on it.
template <class L>
constexpr bool kSp = std::is_same_v<L, RowSharded>;

/// A dense [T, h] as a sub-layer's input: v[R], or v[Row] (rank r its balanced block of rows).
template <class E, class L>
Sharded<E, L> input_of(const M& v, const Group& g) {
  return nn::from_global<E, L, CpuBackend>(v.rows(), v.cols(), g, [&](Index i, Index j) { return v(i, j); });
}

/// The norm's weight gradients as the block hands them on: from X[R] already R; from X[Row]
/// Partial (each rank summed its own tokens) → all_reduce → R, as SequenceParallelBlock's
/// reduce_grads does it.
template <class E, class L>
auto norm_grads(typename nn::LayerNorm<E>::template ParamGrads<L> g) {
  if constexpr (kSp<L>) return nn::SequenceParallelBlock<E>::reduce_norm(std::move(g));
  else return g;
}

/// A tensor-parallel region (attention or MLP; `out` its row-parallel output layer), entered and
/// left as the block does. Forward: X[R] → forward (f, g: all_reduce, + b) → Z[R]; or X[Row] →
/// all_gather → X[R] → forward_partial → Z[Partial] → reduce_scatter → Z[Row] → + b (once, after
/// the reduction). Backward: dZ[R] → backward (f's adjoint: all_reduce) → dX[R]; or dZ[Row] →
/// all_gather → dZ[R] → backward_partial → dX[Partial] → reduce_scatter → dX[Row].
/// Returns {z, dx, parameter gradients}.
template <class E, class L, class Layer, class Out>
auto run_region(const Layer& layer, const Out& out, const M& x, const M& dz, const Group& g) {
  if constexpr (kSp<L>) {
    auto f = layer.forward_partial(all_gather(input_of<E, L>(x, g)));
    auto z = out.add_output_bias(reduce_scatter<RowSharded>(f.z));
    auto gr = layer.backward_partial(f.cache, adjoint::reduce_scatter(input_of<E, L>(dz, g)));
    return std::tuple{std::move(z), adjoint::all_gather<RowSharded>(gr.dx), std::move(gr.params)};
  } else {
    auto f = layer.forward(input_of<E, L>(x, g));
    auto gr = layer.backward(f.cache, input_of<E, L>(dz, g));
    return std::tuple{std::move(f.z), std::move(gr.dx), std::move(gr.params)};
  }
}

/// The norm's ε in E (the twin takes kEps as a constant of its format).
template <class E>
E eps_of() {
  if constexpr (std::is_same_v<E, double>) return kEps;
  else return E(static_cast<float>(kEps));
}

/// A norm fed x and the cotangent dy: y, dx, dγ (dβ).
template <class E, class L>
std::pair<Named, Twins<E>> norm_pair(const Options& o, const ::ref::Norm& n, const M& x, const M& dy, int p) {
  const bool center = o.norm_kind() == nn::NormKind::layer;
  Named got = on_ranks(p, [&](const Group& g) {
    const auto ln = nn::LayerNorm<E>::from_dense(n.gamma, center ? &n.beta : nullptr, o.norm_kind(), g, eps_of<E>());
    const auto f = ln.forward(input_of<E, L>(x, g));
    auto gr = ln.backward(f.cache, input_of<E, L>(dy, g));
    const auto pg = norm_grads<E, L>(std::move(gr.params));
    Named r{{"y", dense_of(f.y)}, {"dx", dense_of(gr.dx)}, {"dgamma", dense_of(pg.dgamma)}};
    if (center) r["dbeta"] = dense_of(*pg.dbeta);
    return r;
  });
  const auto rn = ::ref::cast<RunningOf<E>>(n);
  const auto fo = ::ref::norm_forward(rn, ::ref::cast<RunningOf<E>>(x));
  const auto go = ::ref::norm_backward(rn, fo, ::ref::cast<RunningOf<E>>(dy));
  Twins<E> t{{"y", fo.y}, {"dx", go.dx}, {"dgamma", go.dgamma}};
  if (center) t.emplace_back("dbeta", go.dbeta);
  return {std::move(got), std::move(t)};
}

/// The attention fed x and dz: z, dx, dWo (dbo).
template <class E, class L>
std::pair<Named, Twins<E>> attn_pair(const Options& o, int l, const ::ref::Attn& a, const M& x, const M& dz, int p) {
  Named got = on_ranks(p, [&](const Group& g) {
    const auto nb = [&](const M& m) -> const M* { return o.no_bias ? nullptr : &m; };
    const nn::AttentionMasters<M> m{&a.wq, nb(a.bq), &a.wk, nb(a.bk), &a.wv, nb(a.bv), &a.wo, nb(a.bo)};
    const auto at = nn::Attention<E>::from_dense(block_config(o, l).attention(), m, g);
    const auto [z, dx, pg] = run_region<E, L>(at, at.proj(), x, dz, g);
    Named r{{"z", dense_of(z)}, {"dx", dense_of(dx)}, {"dwo", dense_of(pg.proj.dw)}};
    if (!o.no_bias) r["dbo"] = dense_of(*pg.proj.db);
    return r;
  });
  const auto ra = ::ref::cast<RunningOf<E>>(a);
  const auto rx = ::ref::cast<RunningOf<E>>(x);
  const auto fo = ::ref::attn_forward(ra, rx);
  const auto go = ::ref::attn_backward(ra, rx, fo, ::ref::cast<RunningOf<E>>(dz));
  Twins<E> t{{"z", fo.z}, {"dx", go.dx}, {"dwo", go.dwo}};
  if (!o.no_bias) t.emplace_back("dbo", go.dbo);
  return {std::move(got), std::move(t)};
}

/// The MLP fed x and dz: z, dx, dW2 (db2), dW1 (GeLU: SwiGLU's fused fc1 is physical).
template <class E, class L>
std::pair<Named, Twins<E>> mlp_pair(const Options& o, int l, const ::ref::Mlp& mm, const M& x, const M& dz, int p) {
  const bool glu = o.activation() == nn::Activation::swiglu;
  Named got = on_ranks(p, [&](const Group& g) {
    const auto nb = [&](const M& m) -> const M* { return o.no_bias ? nullptr : &m; };
    const nn::MlpMasters<M> m{&mm.w1, nb(mm.b1), glu ? &mm.wu : nullptr, glu ? nb(mm.bu) : nullptr, &mm.w2, nb(mm.b2)};
    const auto mlp = nn::Mlp<E>::from_dense(block_config(o, l).mlp(), m, g);
    const auto [z, dx, pg] = run_region<E, L>(mlp, mlp.fc2(), x, dz, g);
    Named r{{"z", dense_of(z)}, {"dx", dense_of(dx)}, {"dw2", dense_of(pg.fc2.dw)}};
    if (!glu) r["dw1"] = dense_of(pg.fc1.dw);
    if (!o.no_bias) r["db2"] = dense_of(*pg.fc2.db);
    return r;
  });
  const auto rm = ::ref::cast<RunningOf<E>>(mm);
  const auto rx = ::ref::cast<RunningOf<E>>(x);
  const auto fo = ::ref::mlp_forward(rm, rx);
  const auto go = ::ref::mlp_backward(rm, rx, fo, ::ref::cast<RunningOf<E>>(dz));
  Twins<E> t{{"z", fo.z}, {"dx", go.dx}, {"dw2", go.dw2}};
  if (!glu) t.emplace_back("dw1", go.dw1);
  if (!o.no_bias) t.emplace_back("db2", go.db2);
  return {std::move(got), std::move(t)};
}

/// The rows of one sub-layer; a PrecisionError (the bound itself vacuous) is a failing row. For a
/// double program the twin's value is itself a double evaluation, within the bound of the exact
/// value as the program is: the two are compared against twice the bound.
template <class E, class Run>
void add_rows(std::vector<BoundRow>& rows, const std::string& layer, Run run) {
  constexpr double factor = std::is_same_v<E, double> ? 2.0 : 1.0;
  try {
    const auto [got, twins] = run();
    for (const auto& [name, twin] : twins) {
      const M ratios = pr::error_ratios(got.at(name), pr::values(twin), M(factor * pr::bounds(twin)));
      rows.push_back({layer, name, static_cast<Index>(ratios.size()), ratios.size() ? ratios.maxCoeff() : 0.0,
                      pr::median_ratio(ratios), ""});
    }
  } catch (const pr::PrecisionError& e) {
    rows.push_back({layer, "(bound)", 0, 0.0, 0.0, e.what()});
  }
}

template <class E, class L>
std::vector<BoundRow> check_blocks(const Options& o, int p) {
  const DenseModel dm = make_model(o);
  const DenseRun dr = dense_run(dm);
  const pr::Storage storage =
      std::is_same_v<E, float> || std::is_same_v<E, double> ? pr::Storage{std::nullopt, p} : pr::Storage{pr::format_of<E>, p};
  const pr::StorageScope scope(storage);  // the twin rounds where a program of E at TP p stores
  std::vector<BoundRow> rows;
  const std::size_t blocks = dm.g.blocks.size();
  for (std::size_t l = 0; l < blocks; ++l) {
    // The block's dense pass (double): X → LN1 → attention → dropout, + X → Y1 → LN2 → MLP →
    // dropout, + Y1 → Y, and back. Each sub-layer is fed its input and its output's gradient.
    const ::ref::Block& b = dm.g.blocks[l];
    const ::ref::BlockOut& bo = dr.out.blocks[l];
    const ::ref::BlockGrads& bg = dr.grads.blocks[l];
    const M& x = l == 0 ? dr.out.x0 : dr.out.blocks[l - 1].y;
    const M& dy = l + 1 < blocks ? dr.grads.blocks[l + 1].dx : dr.grads.fn.dx;
    const M dy1 = dy + bg.ln2.dx;                                          // the gradient at Y1
    const M dz_attn = ::ref::dropout(dy1, b.p, b.seed, b.drop_attn);       // dropout′ = the same mask
    const M dz_mlp = ::ref::dropout(dy, b.p, b.seed, b.drop_mlp);
    const int li = static_cast<int>(l);
    const auto round_e = [&](const M& m) { return M(m.unaryExpr([&](double v) { return o.round_to_dtype(v); })); };
    const std::string at = fmt::format("block {} ", l);
    add_rows<E>(rows, at + "ln1", [&] { return norm_pair<E, L>(o, b.ln1, round_e(x), round_e(bg.attn.dx), p); });
    add_rows<E>(rows, at + "attn", [&] { return attn_pair<E, L>(o, li, b.attn, round_e(bo.l1.y), round_e(dz_attn), p); });
    add_rows<E>(rows, at + "ln2", [&] { return norm_pair<E, L>(o, b.ln2, round_e(bo.y1), round_e(bg.mlp.dx), p); });
    add_rows<E>(rows, at + "mlp", [&] { return mlp_pair<E, L>(o, li, b.mlp, round_e(bo.l2.y), round_e(dz_mlp), p); });
  }
  return rows;
}

/// The activations X[R] (tensor parallelism) or X[Row] (--sp: sequence parallelism).
template <class E>
std::vector<BoundRow> check_blocks_of(const Options& o, int p) {
  return o.sp ? check_blocks<E, RowSharded>(o, p) : check_blocks<E, Replicated>(o, p);
}

/// The double program's rows (precision_double.cpp).
std::vector<BoundRow> double_rows(const Options& o, int p);

}  // namespace sv::blocks
