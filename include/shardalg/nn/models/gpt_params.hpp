// shardalg/nn/models/gpt_params.hpp — the GPT's configuration and its parameters by name: GptConfig,
// the logical master tensors (Masters, TensorMap), and the walk over a block's and a norm's
// parameters that nn::Gpt and nn::PipelineGpt share (names, ParamInfo for the optimizer and the
// norm, TensorMap for checkpoints):
//
//   layers.k.ln1.gamma / .beta               [1, h]        R on tp
//   layers.k.attn.qkv.weight / .bias         [h, Q|K|V]    C on tp (logical wq, wk, wv; bq, bk, bv)
//   layers.k.attn.proj.weight / .bias        [h, h] Row / [1, h] R
//   layers.k.ln2.gamma / .beta
//   layers.k.mlp.fc1.weight / .bias          [h, f] C      (SwiGLU: w1 | w_up)
//   layers.k.mlp.fc2.weight / .bias          [f, h] Row / [1, h] R
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

struct GptConfig {
  Index vocab = 256;
  Index hidden = 64;
  Index heads = 4;
  Index groups = 0;  // query groups (GQA); 0: heads
  Index ffn = 0;     // 0: 4·hidden
  Index layers = 2;
  Index seq = 32;
  Index batch = 4;
  Activation activation = Activation::gelu_tanh;
  NormKind norm = NormKind::layer;
  bool bias = true;
  double eps = 1e-5;
  double dropout = 0.0;  // after the embedding and after each sub-layer
  double attn_dropout = 0.0;  // on the attention probabilities (nn/layers/attention.hpp)
  bool sp = false;       // sequence parallelism
  Recompute recompute = Recompute::none;  // what each block keeps for its backward (nn/layers/block.hpp)
  std::uint64_t seed = 1234;
  double init_std = 0.02;
  Index vocab_divisor = 128;  // pad the vocabulary to a multiple of vocab_divisor · TP
  double label_smoothing = 0.0;  // PyTorch's ε: target 1 − ε + ε/V, the others ε/V (nn/layers/cross_entropy.hpp)
  std::int64_t ignore_index = -100;

  [[nodiscard]] Index ffn_size() const { return ffn > 0 ? ffn : 4 * hidden; }
  [[nodiscard]] Index tokens() const { return batch * seq; }
  [[nodiscard]] BlockConfig block(std::uint32_t layer) const {
    BlockConfig c;
    c.hidden = hidden;
    c.heads = heads;
    c.groups = groups;
    c.seq = seq;
    c.ffn = ffn_size();
    c.act = activation;
    c.norm = norm;
    c.bias = bias;
    c.eps = eps;
    c.dropout = dropout;
    c.attn_dropout = attn_dropout;
    c.recompute = recompute;
    c.dropout_seed = seed;
    c.layer = layer;
    return c;
  }
};

/// Dense logical tensors by name (double, column-major): the TP-independent form of the model.
using Masters = std::map<std::string, Eigen::MatrixXd>;

/// How one physical parameter holds logical master tensors: its columns map to (part, column)
/// (fused QKV, SwiGLU's gate|up), and only its first `rows` rows are real (the padded vocabulary).
struct TensorMap {
  std::vector<std::string> parts;
  std::vector<Index> part_cols;
  Index rows = 0;
  std::function<LogicalCol(Index)> col;  // null: the identity onto parts[0]
  [[nodiscard]] LogicalCol operator()(Index c) const { return col ? col(c) : LogicalCol{0, c}; }
};

/// A norm's γ (and β): f(info, map, w, g*), g* null without gradients.
template <class Norm, class G, class F>
void visit_norm_params(Norm& n, const G* g, const std::string& name, Index h, F& f) {
  f(ParamInfo{name + ".gamma", false, {}}, TensorMap{{name + ".gamma"}, {h}, 1, {}}, n.gamma(),
    g ? &g->dgamma : nullptr);
  if (n.beta())
    f(ParamInfo{name + ".beta", false, {}}, TensorMap{{name + ".beta"}, {h}, 1, {}}, *n.beta(),
      g ? &*g->dbeta : nullptr);
}

/// One block's parameters under `pre` ("layers.k."), with their norm weights (K/V copies counted
/// once over tp) and their logical parts (fused Q|K|V, SwiGLU's gate|up): f(info, map, w, g*).
template <class Blk, class G, class F>
void visit_block_params(const GptConfig& cfg, int tp, Blk& b, const G* g, const std::string& pre, F& f) {
  const Index h = cfg.hidden, ffn = cfg.ffn_size();
  visit_norm_params(b.ln1(), g ? &g->ln1 : nullptr, pre + "ln1", h, f);
  auto& at = b.attention();
  const QkvLayout lay = at.layout();
  const Index d = lay.head_dim, hq = cfg.heads * d, hkv = lay.groups * d;
  const auto qmap = [lay](Index c) { return lay(c); };
  std::function<double(Index)> kvw;  // K/V copies on p/groups ranks count once in the norm
  if (lay.replicated_kv()) {
    const double w = static_cast<double>(lay.groups) / lay.p;
    kvw = [lay, w](Index c) { return lay(c).part == 0 ? 1.0 : w; };
  }
  f(ParamInfo{pre + "attn.qkv.weight", true, kvw},
    TensorMap{{pre + "attn.wq", pre + "attn.wk", pre + "attn.wv"}, {hq, hkv, hkv}, h, qmap}, at.qkv().weight(),
    g ? &g->attn.qkv.dw : nullptr);
  if (at.qkv().bias())
    f(ParamInfo{pre + "attn.qkv.bias", false, kvw},
      TensorMap{{pre + "attn.bq", pre + "attn.bk", pre + "attn.bv"}, {hq, hkv, hkv}, 1, qmap}, *at.qkv().bias(),
      g ? &*g->attn.qkv.db : nullptr);
  f(ParamInfo{pre + "attn.proj.weight", true, {}}, TensorMap{{pre + "attn.wo"}, {h}, hq, {}}, at.proj().weight(),
    g ? &g->attn.proj.dw : nullptr);
  if (at.proj().bias())
    f(ParamInfo{pre + "attn.proj.bias", false, {}}, TensorMap{{pre + "attn.bo"}, {h}, 1, {}}, *at.proj().bias(),
      g ? &*g->attn.proj.db : nullptr);
  visit_norm_params(b.ln2(), g ? &g->ln2 : nullptr, pre + "ln2", h, f);
  auto& mlp = b.mlp();
  const bool glu = cfg.activation == Activation::swiglu;
  const SwigluFc1Map smap{ffn, tp};
  std::function<LogicalCol(Index)> fmap;
  if (glu) fmap = [smap](Index c) { return smap(c); };
  const std::vector<std::string> wparts = glu ? std::vector<std::string>{pre + "mlp.w1", pre + "mlp.w_up"}
                                              : std::vector<std::string>{pre + "mlp.w1"};
  const std::vector<std::string> bparts = glu ? std::vector<std::string>{pre + "mlp.b1", pre + "mlp.b_up"}
                                              : std::vector<std::string>{pre + "mlp.b1"};
  const std::vector<Index> widths = glu ? std::vector<Index>{ffn, ffn} : std::vector<Index>{ffn};
  f(ParamInfo{pre + "mlp.fc1.weight", true, {}}, TensorMap{wparts, widths, h, fmap}, mlp.fc1().weight(),
    g ? &g->mlp.fc1.dw : nullptr);
  if (mlp.fc1().bias())
    f(ParamInfo{pre + "mlp.fc1.bias", false, {}}, TensorMap{bparts, widths, 1, fmap}, *mlp.fc1().bias(),
      g ? &*g->mlp.fc1.db : nullptr);
  f(ParamInfo{pre + "mlp.fc2.weight", true, {}}, TensorMap{{pre + "mlp.w2"}, {h}, ffn, {}}, mlp.fc2().weight(),
    g ? &g->mlp.fc2.dw : nullptr);
  if (mlp.fc2().bias())
    f(ParamInfo{pre + "mlp.fc2.bias", false, {}}, TensorMap{{pre + "mlp.b2"}, {h}, 1, {}}, *mlp.fc2().bias(),
      g ? &*g->mlp.fc2.db : nullptr);
}

}  // namespace shardalg::nn
