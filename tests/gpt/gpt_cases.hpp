// tests/gpt/gpt_cases.hpp — shared by test_gpt.cpp (thread worlds) and test_gpt_mpi.cpp: a tiny
// byte-level GPT, deterministic batches from a fixed text, and a training run that records the
// loss of every step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "shardalg/shardalg.hpp"

namespace gt {

using namespace shardalg;
using Ids = std::vector<std::int64_t>;

/// A fixed, self-written text (byte-level tokens).
inline constexpr std::string_view kText =
    "The sharded matrix keeps its layout in its type. A replicated tensor lives whole on every rank; "
    "a row-sharded one keeps a block of tokens; a column-sharded one keeps a block of features; a "
    "partial one keeps a summand that is not yet a value. Multiply a replicated input by a column-"
    "sharded weight and the output is column-sharded, with no message sent. Multiply that by a "
    "row-sharded weight and the output is partial: one all-reduce turns it into a value again. "
    "Under sequence parallelism the tokens stay split between the blocks, an all-gather enters each "
    "column-parallel region and a reduce-scatter leaves each row-parallel one. ";

/// The tiny model of the loss-curve tests: 2 layers, h = 32, 4 heads, 64 tokens per step.
inline nn::GptConfig tiny(bool sp) {
  nn::GptConfig c;
  c.vocab = 256;
  c.hidden = 32;
  c.heads = 4;
  c.layers = 2;
  c.seq = 16;
  c.batch = 4;
  c.dropout = 0.1;
  c.sp = sp;
  c.seed = 2024;
  c.vocab_divisor = 64;
  return c;
}

/// Batch s: `batch` windows of seq + 1 bytes at deterministic offsets; inputs and next-byte targets.
inline std::pair<Ids, Ids> batch_at(const nn::GptConfig& c, std::string_view text, long s) {
  Ids x, y;
  const auto span = static_cast<long>(text.size()) - c.seq - 1;
  for (Index b = 0; b < c.batch; ++b) {
    const long off = ((s * c.batch + b) * 37) % span;
    for (Index t = 0; t < c.seq; ++t) {
      x.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(off + t)]));
      y.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(off + t + 1)]));
    }
  }
  return {x, y};
}

inline nn::Adam<double>::Options adam_options() { return {3e-3, 0.9, 0.95, 1e-8, 0.01}; }

/// `steps` steps of Adam with clipping at 1.0 on `g`; the loss of every step (before its update).
template <class T>
std::vector<double> train(const nn::GptConfig& c, const Group& g, int steps, std::string_view text = kText) {
  auto model = nn::Gpt<T>::init(c, g);
  const auto o = adam_options();
  nn::Adam<T> opt({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = batch_at(c, text, s);
    losses.push_back(static_cast<double>(model.forward_backward(x, y)));
    model.step(opt, 1.0);
  }
  return losses;
}

/// Largest relative difference per step between two curves.
inline double curve_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return w;
}

/// The dense GPT (reference/dense_layers.hpp: plain Eigen) of a model's logical masters, dropout masks of
/// step 0 under `dropout_seed`; attention over sequences of `seq` (default: the config's). Biases
/// and norm shifts the masters lack are zero. Shared by the GPT, mesh and pipeline tests.
inline ref::Gpt dense_gpt(const nn::GptConfig& c, const nn::Masters& m, std::uint64_t dropout_seed, Index seq = 0) {
  using M = Eigen::MatrixXd;
  const Index h = c.hidden, d = h / c.heads, g = c.groups ? c.groups : c.heads, f = c.ffn_size();
  const bool center = c.norm == nn::NormKind::layer, glu = c.activation == nn::Activation::swiglu;
  auto get = [&](const std::string& n, Index r, Index k) { return m.count(n) ? m.at(n) : M(M::Zero(r, k)); };
  auto norm = [&](const std::string& n) { return ref::Norm{m.at(n + ".gamma"), get(n + ".beta", 1, h), center, c.eps}; };
  ref::Gpt r;
  r.emb = m.at("embedding");
  for (Index l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    ref::Block b;
    b.ln1 = norm(p + "ln1");
    b.attn = ref::Attn{m.at(p + "attn.wq"), get(p + "attn.bq", 1, c.heads * d), m.at(p + "attn.wk"),
                       get(p + "attn.bk", 1, g * d),  m.at(p + "attn.wv"), get(p + "attn.bv", 1, g * d),
                       m.at(p + "attn.wo"),           get(p + "attn.bo", 1, h), c.heads, g, seq ? seq : c.seq};
    b.ln2 = norm(p + "ln2");
    b.mlp = ref::Mlp{m.at(p + "mlp.w1"), get(p + "mlp.b1", 1, f), glu ? m.at(p + "mlp.w_up") : M(),
                     glu ? get(p + "mlp.b_up", 1, f) : M(), m.at(p + "mlp.w2"), get(p + "mlp.b2", 1, h),
                     glu ? ref::Act::swiglu : ref::Act::gelu_tanh};
    b.p = c.dropout;
    b.seed = dropout_seed;
    b.drop_attn = nn::tensor_id(static_cast<std::uint32_t>(l), nn::TensorKind::dropout_attn);
    b.drop_mlp = nn::tensor_id(static_cast<std::uint32_t>(l), nn::TensorKind::dropout_mlp);
    b.attn.p = c.attn_dropout;
    b.attn.seed = dropout_seed;
    b.attn.tensor = nn::tensor_id(static_cast<std::uint32_t>(l), nn::attn_probs_dropout_kind);
    r.blocks.push_back(b);
  }
  r.final_norm = norm("final_norm");
  r.p_emb = c.dropout;
  r.seed = dropout_seed;
  r.drop_emb = nn::tensor_id(0, nn::embedding_dropout_kind);
  return r;
}

/// The dense gradients under the model's logical names (those of `Gpt::grads()`), scaled by `w`.
inline nn::Masters dense_grads(const nn::GptConfig& c, const ref::GptGrads& g, double w = 1.0) {
  const bool center = c.norm == nn::NormKind::layer, glu = c.activation == nn::Activation::swiglu;
  nn::Masters m;
  m["embedding"] = w * g.demb;
  auto norm = [&](const std::string& n, const ref::NormGrads& ng) {
    m[n + ".gamma"] = w * ng.dgamma;
    if (center) m[n + ".beta"] = w * ng.dbeta;
  };
  for (Index l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const auto& b = g.blocks[static_cast<std::size_t>(l)];
    norm(p + "ln1", b.ln1);
    norm(p + "ln2", b.ln2);
    m[p + "attn.wq"] = w * b.attn.dwq;
    m[p + "attn.wk"] = w * b.attn.dwk;
    m[p + "attn.wv"] = w * b.attn.dwv;
    m[p + "attn.wo"] = w * b.attn.dwo;
    m[p + "mlp.w1"] = w * b.mlp.dw1;
    m[p + "mlp.w2"] = w * b.mlp.dw2;
    if (glu) m[p + "mlp.w_up"] = w * b.mlp.dwu;
    if (c.bias) {
      m[p + "attn.bq"] = w * b.attn.dbq;
      m[p + "attn.bk"] = w * b.attn.dbk;
      m[p + "attn.bv"] = w * b.attn.dbv;
      m[p + "attn.bo"] = w * b.attn.dbo;
      m[p + "mlp.b1"] = w * b.mlp.db1;
      m[p + "mlp.b2"] = w * b.mlp.db2;
      if (glu) m[p + "mlp.b_up"] = w * b.mlp.dbu;
    }
  }
  norm("final_norm", g.fn);
  return m;
}

}  // namespace gt
