// tools/verify/model.cpp — the dense model, its reference pass, and its masters by name.
#include "model.hpp"

#include <cmath>
#include <random>
#include <string>
#include <utility>

namespace sv {


DenseModel make_model(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto round = [&](double v) { return o.round_to_dtype(v); };
  auto gen = [&](Index r, Index c, double stdev, double mean = 0.0) {
    M m(r, c);
    for (Index j = 0; j < c; ++j)
      for (Index i = 0; i < r; ++i) m(i, j) = round(mean + stdev * nd(rng));
    return m;
  };
  const Index h = o.hidden, f = o.ffn_size(), d = o.hidden / o.heads, g = o.num_groups();
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu;
  const double is_h = 1.0 / std::sqrt(static_cast<double>(h)), is_f = 1.0 / std::sqrt(static_cast<double>(f));
  auto bias = [&](Index c) { return o.no_bias ? M(M::Zero(1, c)) : gen(1, c, 0.1); };
  auto norm = [&] {
    M gm = gen(1, h, 0.1, 1.0);
    return ref::Norm{gm, center ? gen(1, h, 0.1) : M(M::Zero(1, h)), center, kEps};
  };
  DenseModel m;
  m.g.emb = gen(o.vocab, h, is_h);
  for (int l = 0; l < o.layers; ++l) {
    ref::Block b;
    b.ln1 = norm();
    b.attn = ref::Attn{gen(h, o.heads * d, is_h), bias(o.heads * d), gen(h, g * d, is_h), bias(g * d),
                       gen(h, g * d, is_h),       bias(g * d),        gen(h, h, is_h),     bias(h),
                       o.heads,                   g,                  o.seq};
    b.ln2 = norm();
    b.mlp.w1 = gen(h, f, is_h);
    b.mlp.b1 = bias(f);
    if (glu) {
      b.mlp.wu = gen(h, f, is_h);
      b.mlp.bu = bias(f);
    }
    b.mlp.w2 = gen(f, h, is_f);
    b.mlp.b2 = bias(h);
    b.mlp.act = glu ? ref::Act::swiglu : o.activation() == nn::Activation::gelu_erf ? ref::Act::gelu_erf : ref::Act::gelu_tanh;
    const auto c = block_config(o, l);
    b.p = c.dropout;
    b.seed = c.dropout_seed;
    b.drop_attn = nn::tensor_id(c.layer, nn::TensorKind::dropout_attn);
    b.drop_mlp = nn::tensor_id(c.layer, nn::TensorKind::dropout_mlp);
    b.attn.p = c.attn_dropout;  // the dense twin's own keyed mask (reference/dense_layers.hpp)
    b.attn.seed = c.dropout_seed;
    b.attn.tensor = nn::tensor_id(c.layer, nn::attn_probs_dropout_kind);
    m.g.blocks.push_back(std::move(b));
  }
  m.g.final_norm = norm();
  m.g.p_emb = o.dropout;
  m.g.seed = drop_seed(o);
  m.g.drop_emb = nn::tensor_id(0, nn::embedding_dropout_kind);
  std::uniform_int_distribution<std::int64_t> tok(0, o.vocab - 1);
  m.ids.resize(static_cast<std::size_t>(o.tokens()));
  for (auto& t : m.ids) t = tok(rng);
  m.targets.resize(m.ids.size());
  for (std::size_t t = 0; t < m.ids.size(); ++t)  // the next token within a sequence, a random one at its end
    m.targets[t] = (t + 1) % static_cast<std::size_t>(o.seq) != 0 ? m.ids[t + 1] : tok(rng);
  return m;
}

DenseRun dense_run(const DenseModel& m) {
  DenseRun r;
  r.out = ref::gpt_forward(m.g, m.ids, m.targets);
  r.grads = ref::gpt_backward(m.g, m.ids, r.out);
  r.dyf = r.out.dlogits * m.g.emb;
  return r;
}

nn::Masters to_masters(const Options& o, const ref::Gpt& g) {
  nn::Masters m;
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu,
             bias = !o.no_bias;
  auto norm = [&](const std::string& n, const ref::Norm& x) {
    m[n + ".gamma"] = x.gamma;
    if (center) m[n + ".beta"] = x.beta;
  };
  m["embedding"] = g.emb;
  for (std::size_t l = 0; l < g.blocks.size(); ++l) {
    const auto& b = g.blocks[l];
    const std::string pre = "layers." + std::to_string(l) + ".";
    norm(pre + "ln1", b.ln1);
    norm(pre + "ln2", b.ln2);
    m[pre + "attn.wq"] = b.attn.wq, m[pre + "attn.wk"] = b.attn.wk, m[pre + "attn.wv"] = b.attn.wv, m[pre + "attn.wo"] = b.attn.wo;
    m[pre + "mlp.w1"] = b.mlp.w1, m[pre + "mlp.w2"] = b.mlp.w2;
    if (glu) m[pre + "mlp.w_up"] = b.mlp.wu;
    if (bias) {
      m[pre + "attn.bq"] = b.attn.bq, m[pre + "attn.bk"] = b.attn.bk, m[pre + "attn.bv"] = b.attn.bv, m[pre + "attn.bo"] = b.attn.bo;
      m[pre + "mlp.b1"] = b.mlp.b1, m[pre + "mlp.b2"] = b.mlp.b2;
      if (glu) m[pre + "mlp.b_up"] = b.mlp.bu;
    }
  }
  norm("final_norm", g.final_norm);
  return m;
}

nn::Masters fuse_parts(const nn::Masters& in) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> groups{
      {{"attn.wq", "attn.wk", "attn.wv"}, "attn.qkv.weight"},
      {{"attn.bq", "attn.bk", "attn.bv"}, "attn.qkv.bias"},
      {{"mlp.w1", "mlp.w_up"}, "mlp.fc1.weight"},
      {{"mlp.b1", "mlp.b_up"}, "mlp.fc1.bias"}};
  nn::Masters out = in;
  for (const auto& [name, m] : in) {
    const auto dot = name.rfind('.', name.rfind('.') - 1);  // "layers.3." | "attn.wq"
    if (dot == std::string::npos) continue;
    const std::string pre = name.substr(0, dot + 1), leaf = name.substr(dot + 1);
    for (const auto& [parts, fused] : groups) {
      if (parts[0] != leaf) continue;
      std::vector<M> blocks;
      for (const auto& part : parts) {
        auto it = in.find(pre + part);
        if (it == in.end()) continue;
        blocks.push_back(it->second);
        out.erase(pre + part);
      }
      Index cols = 0;
      for (const auto& b : blocks) cols += b.cols();
      M f(blocks[0].rows(), cols);
      Index c = 0;
      for (const auto& b : blocks) f.middleCols(c, b.cols()) = b, c += b.cols();
      out[pre + fused] = f;
    }
  }
  return out;
}

nn::Masters grad_masters(const Options& o, const ref::GptGrads& g) {
  nn::Masters m;
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu,
             bias = !o.no_bias;
  auto norm = [&](const std::string& n, const ref::NormGrads& x) {
    m[n + ".gamma"] = x.dgamma;
    if (center) m[n + ".beta"] = x.dbeta;
  };
  m["embedding"] = g.demb;
  for (std::size_t l = 0; l < g.blocks.size(); ++l) {
    const auto& b = g.blocks[l];
    const std::string pre = "layers." + std::to_string(l) + ".";
    norm(pre + "ln1", b.ln1);
    norm(pre + "ln2", b.ln2);
    m[pre + "attn.wq"] = b.attn.dwq, m[pre + "attn.wk"] = b.attn.dwk, m[pre + "attn.wv"] = b.attn.dwv, m[pre + "attn.wo"] = b.attn.dwo;
    m[pre + "mlp.w1"] = b.mlp.dw1, m[pre + "mlp.w2"] = b.mlp.dw2;
    if (glu) m[pre + "mlp.w_up"] = b.mlp.dwu;
    if (bias) {
      m[pre + "attn.bq"] = b.attn.dbq, m[pre + "attn.bk"] = b.attn.dbk, m[pre + "attn.bv"] = b.attn.dbv, m[pre + "attn.bo"] = b.attn.dbo;
      m[pre + "mlp.b1"] = b.mlp.db1, m[pre + "mlp.b2"] = b.mlp.db2;
      if (glu) m[pre + "mlp.b_up"] = b.mlp.dbu;
    }
  }
  norm("final_norm", g.fn);
  return m;
}

}  // namespace sv
