// tests/layers/cases.hpp — each layer run sharded on a group and compared with its dense twin
// (reference.hpp). Shared by the thread-world tests, the MPI tests and the GPU tests: a case is
// templated on the element type T and the backend B (CpuBackend by default; tests/cuda/
// test_layers.cu instantiates the same cases with cuda::CudaBackend, float and bf16), returns its
// checks, and the caller asserts them on the test's own thread with its own tolerance.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "shardalg/reference/dense_layers.hpp"
#include "shardalg/nn.hpp"
#include "testing.hpp"

namespace lt {

using namespace shardalg;
using ref::M;
using shardalg::Index;

struct Check {
  std::string name;
  ErrorReport err;
};
using Checks = std::vector<Check>;

/// The bounds: normwise relative error against the dense reference.
template <class T>
inline constexpr double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;

/// A dense double matrix of uniform reals in [-scale, scale), rounded to T so that the sharded
/// run and the double reference start from the same values (T may be a storage-only type such
/// as bf16: anything constructible from double and convertible back).
template <class T>
M rnd(Index r, Index c, std::uint64_t seed, double scale = 1.0) {
  const testing::Mat<double> m = testing::random_real<double>(r, c, seed) * scale;
  return m.unaryExpr([](double v) { return static_cast<double>(static_cast<T>(v)); });
}

/// This rank's share of the dense matrix m (already rounded to T) as Sharded<T, L, B>: through
/// the core's shard<L> where Eigen holds T, else (16-bit storage) through nn::from_global, which
/// builds the same local block element by element on the backend.
template <class L, class T, class B>
Sharded<T, L, B> shard_as(const M& m, const Group& g) {
  if constexpr (std::is_arithmetic_v<T>) return shard<L, testing::Mat<T>, B>(testing::Mat<T>(m.cast<T>()), g);
  else return nn::from_global<T, L, B>(m.rows(), m.cols(), g, [&](Index i, Index j) { return m(i, j); });
}

/// A Partial value whose summands are m on rank 0 and zero elsewhere (built by hand: see the
/// report on shard<Partial>).
template <class T, class B>
Sharded<T, Partial, B> partial_on_rank0(const M& m, const Group& g) {
  const bool mine = g.rank() == 0;
  auto local = nn::Kernels<B>::template generate<T>(m.rows(), m.cols(), [&](Index i, Index j) {
    return static_cast<T>(mine ? m(i, j) : 0.0);
  });
  return Sharded<T, Partial, B>(std::move(local), m.rows(), m.cols(), g);
}

template <class S>
void add(Checks& cs, std::string name, const S& actual, const M& expected) {
  cs.push_back({std::move(name), compare(actual, expected)});  // gathers, then B::to_host
}

using ref::hcat;
using ref::qkv_physical;
using ref::swiglu_physical;

// Shapes used throughout: 2 sequences of 6 tokens, hidden 24, 12 heads of 2, FFN 48. Every
// split dimension divides by 1, 2, 3 and 4.
inline constexpr Index kBatch = 2, kSeq = 6, kTokens = kBatch * kSeq, kHidden = 24, kHeads = 12, kFfn = 48;
inline constexpr double kEps = 1.0 / 131072;  // exactly representable in float and double

/// Query-group counts valid at world size p (a multiple or a divisor of p, dividing 12 heads).
inline std::vector<Index> valid_groups(int p) {
  std::vector<Index> out;
  for (Index g : {12, 6, 4, 3, 2, 1})
    if (g % p == 0 || p % g == 0) out.push_back(g);
  return out;
}

// ---- linear layers ------------------------------------------------------------------------------
template <class T, class B = CpuBackend>
Checks case_linear(const Group& g) {
  Checks cs;
  const M x = rnd<T>(kTokens, kHidden, 11), w = rnd<T>(kHidden, kFfn, 12, 0.3), b = rnd<T>(1, kFfn, 13);
  const M dy = rnd<T>(kTokens, kFfn, 14);
  auto col = nn::ColumnParallelLinear<T, B>::from_dense(w, &b, g);
  const auto X = shard_as<Replicated, T, B>(x, g);
  const auto f = col.forward(X);
  add(cs, "col.y", f.y, ref::linear(x, w, b));
  const auto rg = ref::linear_backward(x, w, dy);
  const auto dY = shard_as<ColSharded, T, B>(dy, g);
  const auto gr = col.backward(f.cache, dY);
  add(cs, "col.dx", gr.dx, rg.dx);
  add(cs, "col.dw", gr.params.dw, rg.dw);
  add(cs, "col.db", *gr.params.db, rg.db);
  const auto gp = col.backward_partial(f.cache, dY);
  add(cs, "col.dx_partial", gp.dx, rg.dx);
  const auto fg = col.forward_gathered(X);
  add(cs, "col.gathered.y", fg.y, ref::linear(x, w, b));
  const auto gg = col.backward_gathered(fg.cache, shard_as<Replicated, T, B>(dy, g));
  add(cs, "col.gathered.dx", gg.dx, rg.dx);
  add(cs, "col.gathered.dw", gg.params.dw, rg.dw);
  auto col2 = col;
  col2.sgd(gr.params, T(0.5));
  add(cs, "col.sgd.w", col2.weight(), w - 0.5 * rg.dw);
  add(cs, "col.sgd.b", *col2.bias(), b - 0.5 * rg.db);

  const M h = rnd<T>(kTokens, kFfn, 15), w2 = rnd<T>(kFfn, kHidden, 16, 0.3), b2 = rnd<T>(1, kHidden, 17);
  const M dz = rnd<T>(kTokens, kHidden, 18);
  auto row = nn::RowParallelLinear<T, B>::from_dense(w2, &b2, g);
  const auto fr = row.forward(shard_as<ColSharded, T, B>(h, g));
  add(cs, "row.z", fr.z, ref::linear(h, w2, b2));
  const auto rr = ref::linear_backward(h, w2, dz);
  const auto dZ = shard_as<Replicated, T, B>(dz, g);
  const auto grr = row.backward(fr.cache, dZ);
  add(cs, "row.dh", grr.dh, rr.dx);
  add(cs, "row.dw", grr.params.dw, rr.dw);
  add(cs, "row.db", *grr.params.db, rr.db);
  const auto fs = row.forward_split(shard_as<Replicated, T, B>(h, g));
  add(cs, "row.split.z", fs.z, ref::linear(h, w2, b2));
  const auto gs = row.backward_split(fs.cache, dZ);
  add(cs, "row.split.dx", gs.dx, rr.dx);
  add(cs, "row.split.dw", gs.params.dw, rr.dw);
  auto row2 = row;
  row2.sgd(grr.params, T(0.5));
  add(cs, "row.sgd.w", row2.weight(), w2 - 0.5 * rr.dw);
  return cs;
}

// ---- MLP ---------------------------------------------------------------------------------------------
inline ref::Act to_ref(nn::Activation a) {
  return a == nn::Activation::gelu_tanh ? ref::Act::gelu_tanh
         : a == nn::Activation::gelu_erf ? ref::Act::gelu_erf
                                          : ref::Act::swiglu;
}

template <class T, class B = CpuBackend>
Checks case_mlp(const Group& g, nn::Activation act) {
  Checks cs;
  const int p = g.size();
  const bool glu = act == nn::Activation::swiglu;
  ref::Mlp rm{rnd<T>(kHidden, kFfn, 21, 0.4), rnd<T>(1, kFfn, 22, 0.5), rnd<T>(kHidden, kFfn, 23, 0.4),
              rnd<T>(1, kFfn, 24, 0.5),      rnd<T>(kFfn, kHidden, 25, 0.3), rnd<T>(1, kHidden, 26), to_ref(act)};
  const M x = rnd<T>(kTokens, kHidden, 27), dz = rnd<T>(kTokens, kHidden, 28);
  const nn::MlpConfig cfg{kHidden, kFfn, act, true};
  const nn::MlpMasters<M> masters{&rm.w1, &rm.b1, glu ? &rm.wu : nullptr, glu ? &rm.bu : nullptr, &rm.w2, &rm.b2};
  const auto mlp = nn::Mlp<T, B>::from_dense(cfg, masters, g);
  const auto f = mlp.forward(shard_as<Replicated, T, B>(x, g));
  const auto ro = ref::mlp_forward(rm, x);
  add(cs, "mlp.z", f.z, ro.z);
  const auto gr = mlp.backward(f.cache, shard_as<Replicated, T, B>(dz, g));
  const auto rg = ref::mlp_backward(rm, x, ro, dz);
  add(cs, "mlp.dx", gr.dx, rg.dx);
  add(cs, "mlp.dw1", gr.params.fc1.dw, glu ? swiglu_physical(rg.dw1, rg.dwu, p) : rg.dw1);
  add(cs, "mlp.db1", *gr.params.fc1.db, glu ? swiglu_physical(rg.db1, rg.dbu, p) : rg.db1);
  add(cs, "mlp.dw2", gr.params.fc2.dw, rg.dw2);
  add(cs, "mlp.db2", *gr.params.fc2.db, rg.db2);
  return cs;
}

// ---- norms ----------------------------------------------------------------------------------------------
template <class T, class B = CpuBackend>
Checks case_norm(const Group& g, nn::NormKind kind) {
  Checks cs;
  const bool center = kind == nn::NormKind::layer;
  const std::string tag = center ? "layernorm" : "rmsnorm";
  M gamma = rnd<T>(1, kHidden, 31, 0.25);
  gamma.array() += 1.0;
  const M beta = center ? rnd<T>(1, kHidden, 32) : M::Zero(1, kHidden);
  const ref::Norm rn{gamma, beta, center, kEps};
  M x = rnd<T>(kTokens, kHidden, 33);
  x.array() += 0.5;  // a mean away from zero
  const M dy = rnd<T>(kTokens, kHidden, 34);
  const auto ro = ref::norm_forward(rn, x);
  const auto rg = ref::norm_backward(rn, ro, dy);

  const auto ln = nn::LayerNorm<T, B>::from_dense(gamma, center ? &beta : nullptr, kind, g, T(kEps));
  {  // X[R]: the parameter gradients are R
    const auto f = ln.forward(shard_as<Replicated, T, B>(x, g));
    add(cs, tag + ".R.y", f.y, ro.y);
    const auto gr = ln.backward(f.cache, shard_as<Replicated, T, B>(dy, g));
    static_assert(std::is_same_v<typename std::decay_t<decltype(gr.params.dgamma)>::layout, Replicated>);
    add(cs, tag + ".R.dx", gr.dx, rg.dx);
    add(cs, tag + ".R.dgamma", gr.params.dgamma, rg.dgamma);
    if (center) add(cs, tag + ".R.dbeta", *gr.params.dbeta, rg.dbeta);
  }
  {  // X[Row]: the parameter gradients are Partial until all-reduced
    const auto f = ln.forward(shard_as<RowSharded, T, B>(x, g));
    add(cs, tag + ".Row.y", f.y, ro.y);
    const auto gr = ln.backward(f.cache, shard_as<RowSharded, T, B>(dy, g));
    static_assert(std::is_same_v<typename std::decay_t<decltype(gr.params.dgamma)>::layout, Partial>);
    add(cs, tag + ".Row.dx", gr.dx, rg.dx);
    add(cs, tag + ".Row.dgamma", gr.params.dgamma, rg.dgamma);
    if (center) add(cs, tag + ".Row.dbeta", *gr.params.dbeta, rg.dbeta);
    auto ln2 = ln;
    typename nn::LayerNorm<T, B>::template ParamGrads<Replicated> reduced{all_reduce(gr.params.dgamma), std::nullopt};
    if (center) reduced.dbeta = all_reduce(*gr.params.dbeta);
    ln2.sgd(reduced, T(0.5));
    add(cs, tag + ".Row.sgd.gamma", ln2.gamma(), gamma - 0.5 * rg.dgamma);
  }
  {  // X[C]: parallel statistics
    const auto pln = nn::ParallelLayerNorm<T, B>::from_dense(gamma, center ? &beta : nullptr, kind, g, T(kEps));
    const auto f = pln.forward(shard_as<ColSharded, T, B>(x, g));
    add(cs, tag + ".C.y", f.y, ro.y);
    const auto gr = pln.backward(f.cache, shard_as<ColSharded, T, B>(dy, g));
    add(cs, tag + ".C.dx", gr.dx, rg.dx);
    add(cs, tag + ".C.dgamma", gr.params.dgamma, rg.dgamma);
    if (center) add(cs, tag + ".C.dbeta", *gr.params.dbeta, rg.dbeta);
  }
  return cs;
}

// ---- dropout ---------------------------------------------------------------------------------------------
template <class T, class B = CpuBackend>
Checks case_dropout(const Group& g) {
  Checks cs;
  const M x = rnd<T>(kTokens, kHidden, 41), dy = rnd<T>(kTokens, kHidden, 42);
  const std::uint64_t seed = 0xD5, id = nn::tensor_id(3, nn::TensorKind::dropout);
  const nn::Dropout drop(0.25, seed, id);
  const M ey = ref::dropout(x, 0.25, seed, id), edx = ref::dropout(dy, 0.25, seed, id);
  add(cs, "dropout.R.y", drop.forward(shard_as<Replicated, T, B>(x, g)), ey);
  add(cs, "dropout.Row.y", drop.forward(shard_as<RowSharded, T, B>(x, g)), ey);
  add(cs, "dropout.C.y", drop.forward(shard_as<ColSharded, T, B>(x, g)), ey);
  // A Partial input: rank 0 holds x, the others zero.
  add(cs, "dropout.Partial.y", drop.forward(partial_on_rank0<T, B>(x, g)), ey);
  add(cs, "dropout.R.dx", drop.backward(shard_as<Replicated, T, B>(dy, g)), edx);
  add(cs, "dropout.Row.dx", drop.backward(shard_as<RowSharded, T, B>(dy, g)), edx);
  add(cs, "dropout.C.dx", drop.backward(shard_as<ColSharded, T, B>(dy, g)), edx);
  return cs;
}

// ---- attention -------------------------------------------------------------------------------------------
inline ref::Attn make_ref_attn(Index groups, std::uint64_t s, bool bias, auto rnd_fn) {
  const Index d = kHidden / kHeads;
  auto bias_or_zero = [&](Index c, std::uint64_t seed) { return bias ? rnd_fn(1, c, seed, 0.5) : M(M::Zero(1, c)); };
  return ref::Attn{rnd_fn(kHidden, kHeads * d, s + 1, 0.5), bias_or_zero(kHeads * d, s + 2),
                   rnd_fn(kHidden, groups * d, s + 3, 0.5), bias_or_zero(groups * d, s + 4),
                   rnd_fn(kHidden, groups * d, s + 5, 0.5), bias_or_zero(groups * d, s + 6),
                   rnd_fn(kHidden, kHidden, s + 7, 0.3),    bias_or_zero(kHidden, s + 8),
                   kHeads,
                   groups,
                   kSeq};
}
inline nn::AttentionMasters<M> masters_of(const ref::Attn& a) {
  return {&a.wq, &a.bq, &a.wk, &a.bk, &a.wv, &a.bv, &a.wo, &a.bo};
}

template <class T, class B>
void add_attn_grads(Checks& cs, const std::string& tag, const typename nn::Attention<T, B>::ParamGrads& pg,
                    const ref::AttnGrads& rg, Index groups, int p, bool bias) {
  const Index d = kHidden / kHeads;
  add(cs, tag + ".dwqkv", pg.qkv.dw, qkv_physical(rg.dwq, rg.dwk, rg.dwv, kHeads, groups, d, p));
  add(cs, tag + ".dwo", pg.proj.dw, rg.dwo);
  if (bias) {
    add(cs, tag + ".dbqkv", *pg.qkv.db, qkv_physical(rg.dbq, rg.dbk, rg.dbv, kHeads, groups, d, p));
    add(cs, tag + ".dbo", *pg.proj.db, rg.dbo);
  }
}

/// Attention against its dense twin: z, dx and the weight gradients. With `prob` > 0, attention
/// dropout (nn/layers/attention.hpp) at that probability, on other weights and inputs: the sharded layer
/// keys its mask by global head and sequence, the dense twin by the whole tensor's (b, h, i, j):
/// equal at every TP.
template <class T, class B = CpuBackend>
Checks case_attention(const Group& g, Index groups, double prob = 0) {
  Checks cs;
  const bool drop = prob > 0;
  const std::uint64_t s0 = drop ? 100 : 0;
  const std::string tag = (drop ? "attn_dropout.g" : "attn.g") + std::to_string(groups);
  auto ra = make_ref_attn(groups, 50 + s0, true, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<T>(r, c, s, sc); });
  const M x = rnd<T>(kTokens, kHidden, 61 + s0), dz = rnd<T>(kTokens, kHidden, 62 + s0);
  nn::AttentionConfig cfg{kHidden, kHeads, groups, kSeq, true};
  if (drop) {
    const std::uint64_t seed = 0xA77D, layer = 5;
    ra.p = prob;
    ra.seed = seed;
    ra.tensor = nn::tensor_id(layer, nn::attn_probs_dropout_kind);
    cfg.dropout = prob;
    cfg.dropout_seed = seed;
    cfg.layer = layer;
  }
  const auto attn = nn::Attention<T, B>::from_dense(cfg, masters_of(ra), g);
  const auto f = attn.forward(shard_as<Replicated, T, B>(x, g));
  const auto ro = ref::attn_forward(ra, x);
  add(cs, tag + ".z", f.z, ro.z);
  const auto gr = attn.backward(f.cache, shard_as<Replicated, T, B>(dz, g));
  const auto rg = ref::attn_backward(ra, x, ro, dz);
  add(cs, tag + ".dx", gr.dx, rg.dx);
  add_attn_grads<T, B>(cs, tag, gr.params, rg, groups, g.size(), true);
  return cs;
}

// ---- transformer block ------------------------------------------------------------------------------------
struct BlockCase {
  nn::NormKind norm;
  nn::Activation act;
  bool bias;
  Index groups;
  double dropout;
  double attn_dropout = 0.0;  // on the attention probabilities
};

inline ref::Block make_ref_block(const BlockCase& bc, auto rnd_fn) {
  const bool center = bc.norm == nn::NormKind::layer;
  auto gamma = [&](std::uint64_t s) {
    M gm = rnd_fn(1, kHidden, s, 0.25);
    gm.array() += 1.0;
    return gm;
  };
  auto beta = [&](std::uint64_t s) { return center ? rnd_fn(1, kHidden, s, 0.5) : M(M::Zero(1, kHidden)); };
  auto bias = [&](Index c, std::uint64_t s) { return bc.bias ? rnd_fn(1, c, s, 0.5) : M(M::Zero(1, c)); };
  ref::Block b;
  b.ln1 = {gamma(71), beta(72), center, kEps};
  b.attn = make_ref_attn(bc.groups, 80, bc.bias, rnd_fn);
  b.ln2 = {gamma(73), beta(74), center, kEps};
  b.mlp = {rnd_fn(kHidden, kFfn, 91, 0.4), bias(kFfn, 92),     rnd_fn(kHidden, kFfn, 93, 0.4), bias(kFfn, 94),
           rnd_fn(kFfn, kHidden, 95, 0.3), bias(kHidden, 96), to_ref(bc.act)};
  b.p = bc.dropout;
  b.seed = 0xB10C;
  b.drop_attn = nn::tensor_id(2, nn::TensorKind::dropout_attn);
  b.drop_mlp = nn::tensor_id(2, nn::TensorKind::dropout_mlp);
  b.attn.p = bc.attn_dropout;
  b.attn.seed = b.seed;
  b.attn.tensor = nn::tensor_id(2, nn::attn_probs_dropout_kind);
  return b;
}

inline nn::BlockConfig block_config(const BlockCase& bc) {
  nn::BlockConfig c;
  c.hidden = kHidden;
  c.heads = kHeads;
  c.groups = bc.groups;
  c.seq = kSeq;
  c.ffn = kFfn;
  c.act = bc.act;
  c.norm = bc.norm;
  c.bias = bc.bias;
  c.eps = kEps;
  c.dropout = bc.dropout;
  c.attn_dropout = bc.attn_dropout;
  c.dropout_seed = 0xB10C;
  c.layer = 2;
  return c;
}

/// The dense block's weights as the masters a sharded block (plain or sequence-parallel) is made from.
inline nn::BlockMasters<M> block_masters(const BlockCase& bc, const ref::Block& rb) {
  const bool center = bc.norm == nn::NormKind::layer, glu = bc.act == nn::Activation::swiglu;
  const auto nb = [&](const M& m) -> const M* { return bc.bias ? &m : nullptr; };
  nn::BlockMasters<M> m{&rb.ln1.gamma, center ? &rb.ln1.beta : nullptr, masters_of(rb.attn),
                        &rb.ln2.gamma, center ? &rb.ln2.beta : nullptr,
                        {&rb.mlp.w1, nb(rb.mlp.b1), glu ? &rb.mlp.wu : nullptr, glu ? nb(rb.mlp.bu) : nullptr,
                         &rb.mlp.w2, nb(rb.mlp.b2)}};
  m.attn.bq = nb(rb.attn.bq);
  m.attn.bk = nb(rb.attn.bk);
  m.attn.bv = nb(rb.attn.bv);
  m.attn.bo = nb(rb.attn.bo);
  return m;
}

template <class T, class B = CpuBackend>
nn::TransformerBlock<T, B> make_block(const BlockCase& bc, const ref::Block& rb, const Group& g) {
  return nn::TransformerBlock<T, B>::from_dense(block_config(bc), block_masters(bc, rb), g);
}

template <class T, class B = CpuBackend>
Checks case_block(const Group& g, const BlockCase& bc) {
  Checks cs;
  const int p = g.size();
  const bool center = bc.norm == nn::NormKind::layer, glu = bc.act == nn::Activation::swiglu;
  const std::string tag = std::string("block.") + (center ? "ln" : "rms") + (glu ? ".swiglu" : ".gelu") + ".g" +
                          std::to_string(bc.groups) + (bc.attn_dropout > 0 ? ".attn_dropout" : "");
  const auto rb = make_ref_block(bc, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<T>(r, c, s, sc); });
  const auto blk = make_block<T, B>(bc, rb, g);
  const M x = rnd<T>(kTokens, kHidden, 101), dy = rnd<T>(kTokens, kHidden, 102);
  const auto f = blk.forward(shard_as<Replicated, T, B>(x, g));
  const auto ro = ref::block_forward(rb, x);
  add(cs, tag + ".y", f.y, ro.y);
  const auto gr = blk.backward(f.cache, shard_as<Replicated, T, B>(dy, g));
  const auto rg = ref::block_backward(rb, x, ro, dy);
  add(cs, tag + ".dx", gr.dx, rg.dx);
  add(cs, tag + ".ln1.dgamma", gr.params.ln1.dgamma, rg.ln1.dgamma);
  add(cs, tag + ".ln2.dgamma", gr.params.ln2.dgamma, rg.ln2.dgamma);
  if (center) {
    add(cs, tag + ".ln1.dbeta", *gr.params.ln1.dbeta, rg.ln1.dbeta);
    add(cs, tag + ".ln2.dbeta", *gr.params.ln2.dbeta, rg.ln2.dbeta);
  }
  add_attn_grads<T, B>(cs, tag + ".attn", gr.params.attn, rg.attn, bc.groups, p, bc.bias);
  const auto& pm = gr.params.mlp;
  add(cs, tag + ".mlp.dw1", pm.fc1.dw, glu ? swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, p) : rg.mlp.dw1);
  add(cs, tag + ".mlp.dw2", pm.fc2.dw, rg.mlp.dw2);
  if (bc.bias) {
    add(cs, tag + ".mlp.db1", *pm.fc1.db, glu ? swiglu_physical(rg.mlp.db1, rg.mlp.dbu, p) : rg.mlp.db1);
    add(cs, tag + ".mlp.db2", *pm.fc2.db, rg.mlp.db2);
  }
  return cs;
}

/// The block configurations every world size runs: MHA with LayerNorm, GeLU, biases and dropout;
/// GQA with RMSNorm, SwiGLU, no biases (groups a divisor of p where p > 1, else a multiple).
inline std::vector<BlockCase> block_cases(int p) {
  std::vector<BlockCase> out{{nn::NormKind::layer, nn::Activation::gelu_tanh, true, kHeads, 0.1},
                             {nn::NormKind::rms, nn::Activation::swiglu, false, p == 3 ? 3 : 2, 0.0},
                             {nn::NormKind::layer, nn::Activation::gelu_erf, true, 1, 0.2}};
  return out;
}

// ---- ledger -----------------------------------------------------------------------------------------------
struct LedgerSummary {
  std::size_t fwd_all_reduce = 0, fwd_total = 0, bwd_all_reduce = 0, bwd_total = 0;
  std::vector<std::size_t> fwd_elements, bwd_elements;
  std::size_t bwd_kv_sync = 0, bwd_kv_sync_elements = 0;
  std::size_t pln_fwd = 0, pln_bwd = 0, pln_total = 0, pln_fwd_elements = 0, pln_bwd_elements = 0;
  std::size_t total = 0;
  std::string table;
};

/// One block forward and backward on a ledgered handle of g; and a parallel LayerNorm.
template <class T, class B = CpuBackend>
LedgerSummary ledger_case(const Group& g, const BlockCase& bc) {
  Ledger ledger;
  const Group lg = ledgered(g, ledger);
  const auto rb = make_ref_block(bc, [](Index r, Index c, std::uint64_t s, double sc) { return rnd<T>(r, c, s, sc); });
  const auto blk = make_block<T, B>(bc, rb, lg);
  const auto X = shard_as<Replicated, T, B>(rnd<T>(kTokens, kHidden, 101), lg);
  const auto dY = shard_as<Replicated, T, B>(rnd<T>(kTokens, kHidden, 102), lg);
  std::optional<typename nn::TransformerBlock<T, B>::Forward> f;
  {
    auto sc = ledger.scope("block.fwd");
    f.emplace(blk.forward(X));
  }
  {
    auto sc = ledger.scope("block.bwd");
    (void)blk.backward(f->cache, dY);
  }
  LedgerSummary s;
  s.fwd_all_reduce = ledger.count(CollectiveKind::all_reduce, "block.fwd");
  s.fwd_total = ledger.count("block.fwd");
  s.bwd_all_reduce = ledger.count(CollectiveKind::all_reduce, "block.bwd");
  s.bwd_total = ledger.count("block.bwd");
  for (const auto& e : ledger.select("block.fwd")) s.fwd_elements.push_back(e.elements);
  for (const auto& e : ledger.select("block.bwd"))
    if (!Ledger::in_scope(e.scope, "block.bwd/attn/kv_replica_sync")) s.bwd_elements.push_back(e.elements);
  s.bwd_kv_sync = ledger.count(CollectiveKind::all_reduce, "block.bwd/attn/kv_replica_sync");
  if (s.bwd_kv_sync > 0) s.bwd_kv_sync_elements = ledger.select("block.bwd/attn/kv_replica_sync").at(0).elements;

  const auto pln = nn::ParallelLayerNorm<T, B>::from_dense(rb.ln1.gamma, &rb.ln1.beta, nn::NormKind::layer, lg, T(kEps));
  std::optional<typename nn::ParallelLayerNorm<T, B>::Forward> pf;
  {
    auto sc = ledger.scope("pln.fwd");
    pf.emplace(pln.forward(shard_as<ColSharded, T, B>(rnd<T>(kTokens, kHidden, 103), lg)));
  }
  {
    auto sc = ledger.scope("pln.bwd");
    (void)pln.backward(pf->cache, shard_as<ColSharded, T, B>(rnd<T>(kTokens, kHidden, 104), lg));
  }
  s.pln_fwd = ledger.count(CollectiveKind::all_reduce, "pln.fwd");
  s.pln_bwd = ledger.count(CollectiveKind::all_reduce, "pln.bwd");
  s.pln_total = ledger.count("pln.fwd") + ledger.count("pln.bwd");
  if (s.pln_fwd) s.pln_fwd_elements = ledger.select("pln.fwd").at(0).elements;
  if (s.pln_bwd) s.pln_bwd_elements = ledger.select("pln.bwd").at(0).elements;
  s.total = ledger.count();
  s.table = ledger.table();
  return s;
}

}  // namespace lt
