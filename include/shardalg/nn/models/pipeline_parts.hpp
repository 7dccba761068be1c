// shardalg/nn/models/pipeline_parts.hpp — the pieces nn/models/pipeline_gpt.hpp composes that are not a
// layer: micro-batches and their loss scaling, gradient accumulation over micro-batches, the
// bytes a forward cache holds, and physical → logical gradient tensors (the names and maps of
// nn::Gpt, so that a stage's gradients compare with Gpt::grad_masters and the dense model's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/layers/split_backward.hpp"

namespace shardalg::nn {

/// How each micro-batch's loss gradient is scaled so that the gradients summed over micro-batches
/// (and data-parallel replicas) are those of the whole batch's mean loss.
///   microbatches  d(mean_j)/M/D: Megatron-LM's default (each micro-batch's mean loss over M and
///                 the replicas' average); the whole batch's mean when every micro-batch counts
///                 as many targets.
///   tokens        d(Σ_t loss_t)/N with N the counted targets of the whole global batch (Megatron's
///                 calculate_per_token_loss): the whole batch's mean whatever the micro-batches'
///                 sizes — needed with variable sequence lengths or ignored targets.
enum class LossScaling { microbatches, tokens };

/// One micro-batch: token ids and targets (sequences × seq, batch-major), and the global index of
/// its first token (the dropout masks are keyed by it: the same masks as the whole batch's).
struct MicroBatch {
  std::vector<std::int64_t> tokens, targets;
  Index seq = 0, sequences = 0;
  Index row_base = 0;
  [[nodiscard]] Index rows() const { return seq * sequences; }
};

/// Cut `b` sequences of length `seq` (tokens and targets batch-major) into `m` micro-batches of
/// b/m sequences; `row0`: the global index of the first token (a data-parallel replica's offset).
inline std::vector<MicroBatch> split_microbatches(const std::vector<std::int64_t>& tokens,
                                                  const std::vector<std::int64_t>& targets, Index seq, int m,
                                                  Index row0 = 0) {
  using shardalg::detail::cat;
  const Index total = static_cast<Index>(tokens.size());
  if (seq < 1 || m < 1 || total % seq != 0 || (total / seq) % m != 0 || targets.size() != tokens.size())
    throw ShapeError(cat("split_microbatches: ", tokens.size(), " tokens (", targets.size(), " targets) of sequences of ",
                         seq, " do not split into ", m, " micro-batches of whole sequences"));
  const Index per = total / m;
  std::vector<MicroBatch> out;
  for (int j = 0; j < m; ++j) {
    MicroBatch b;
    b.tokens.assign(tokens.begin() + j * per, tokens.begin() + (j + 1) * per);
    b.targets.assign(targets.begin() + j * per, targets.begin() + (j + 1) * per);
    b.seq = seq;
    b.sequences = per / seq;
    b.row_base = row0 + j * per;
    out.push_back(std::move(b));
  }
  return out;
}

namespace detail {

// ---- accumulation over micro-batches: acc := acc + g, field by field (Partial + Partial is a
// sum of summands: still Partial, reduced once at the end) ----------------------------------
template <class S>
void add_to(S& acc, S&& g) {
  acc = acc + g;
}
template <class S>
void add_to(std::optional<S>& acc, std::optional<S>&& g) {
  if (!g) return;
  if (acc) *acc = *acc + *g;
  else acc = std::move(g);
}
template <class G>
void add_linear(G& a, G&& b) {
  add_to(a.dw, std::move(b.dw));
  add_to(a.db, std::move(b.db));
}
template <class G>
void add_norm(G& a, G&& b) {
  add_to(a.dgamma, std::move(b.dgamma));
  add_to(a.dbeta, std::move(b.dbeta));
}
template <class G>
void add_block(std::optional<G>& acc, G&& g) {
  if (!acc) {
    acc = std::move(g);
    return;
  }
  add_norm(acc->ln1, std::move(g.ln1));
  add_linear(acc->attn.qkv, std::move(g.attn.qkv));
  add_linear(acc->attn.proj, std::move(g.attn.proj));
  add_norm(acc->ln2, std::move(g.ln2));
  add_linear(acc->mlp.fc1, std::move(g.mlp.fc1));
  add_linear(acc->mlp.fc2, std::move(g.mlp.fc2));
}

// ---- bytes of what a forward keeps (the matrices themselves) ---------------------------------
namespace pp {  // (nn/train/measured_memory.hpp has its own local_bytes and matrix_bytes in nn::detail)
template <class S>
std::size_t local_bytes(const S& s) {
  return static_cast<std::size_t>(s.local().size()) * sizeof(typename S::value_type);
}
template <class M>
std::size_t matrix_bytes(const M& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(typename M::Scalar);
}
template <class C>
std::size_t block_cache_bytes(const C& c) {
  return local_bytes(c.ln1.xhat) + matrix_bytes(c.ln1.rstd) + local_bytes(c.attn.qkv_in.x) + local_bytes(c.attn.qkv) +
         matrix_bytes(c.attn.probs) + local_bytes(c.attn.proj.h) + local_bytes(c.ln2.xhat) + matrix_bytes(c.ln2.rstd) +
         local_bytes(c.mlp.fc1.x) + local_bytes(c.mlp.h) + local_bytes(c.mlp.fc2.h) + (c.input ? local_bytes(*c.input) : std::size_t{0});
}
}  // namespace pp

// ---- physical → logical (gathers over tp: verification traffic) --------------------------
template <class S>
void unmap(const S& w, const TensorMap& m, Masters& out) {
  const auto full = to_dense(w);
  for (std::size_t k = 0; k < m.parts.size(); ++k) out[m.parts[k]] = Eigen::MatrixXd::Zero(m.rows, m.part_cols[k]);
  for (Index c = 0; c < w.cols(); ++c) {
    const auto lc = m(c);
    auto& dst = out[m.parts[static_cast<std::size_t>(lc.part)]];
    for (Index r = 0; r < m.rows; ++r) dst(r, lc.col) = static_cast<double>(full(r, c));
  }
}
/// A norm's gradients under `name` (gamma, beta).
template <class G>
void unmap_norm(const G& g, const std::string& name, Index h, Masters& out) {
  unmap(g.dgamma, TensorMap{{name + ".gamma"}, {h}, 1, {}}, out);
  if (g.dbeta) unmap(*g.dbeta, TensorMap{{name + ".beta"}, {h}, 1, {}}, out);
}
/// A block's gradients (TransformerBlock::ParamGrads, reduced) under Gpt's names for layer `id`.
template <class G>
void unmap_block(const G& g, const GptConfig& c, const QkvLayout& lay, int tp, Index id, Masters& out) {
  const std::string pre = "layers." + std::to_string(id) + ".";
  const Index h = c.hidden, ffn = c.ffn_size(), d = lay.head_dim, hq = c.heads * d, hkv = lay.groups * d;
  unmap_norm(g.ln1, pre + "ln1", h, out);
  unmap_norm(g.ln2, pre + "ln2", h, out);
  const auto qmap = [lay](Index col) { return lay(col); };
  unmap(g.attn.qkv.dw, TensorMap{{pre + "attn.wq", pre + "attn.wk", pre + "attn.wv"}, {hq, hkv, hkv}, h, qmap}, out);
  if (g.attn.qkv.db)
    unmap(*g.attn.qkv.db, TensorMap{{pre + "attn.bq", pre + "attn.bk", pre + "attn.bv"}, {hq, hkv, hkv}, 1, qmap}, out);
  unmap(g.attn.proj.dw, TensorMap{{pre + "attn.wo"}, {h}, hq, {}}, out);
  if (g.attn.proj.db) unmap(*g.attn.proj.db, TensorMap{{pre + "attn.bo"}, {h}, 1, {}}, out);
  const bool glu = c.activation == Activation::swiglu;
  const SwigluFc1Map smap{ffn, tp};
  std::function<LogicalCol(Index)> fmap;
  if (glu) fmap = [smap](Index col) { return smap(col); };
  const std::vector<Index> widths = glu ? std::vector<Index>{ffn, ffn} : std::vector<Index>{ffn};
  unmap(g.mlp.fc1.dw,
        TensorMap{glu ? std::vector<std::string>{pre + "mlp.w1", pre + "mlp.w_up"} : std::vector<std::string>{pre + "mlp.w1"},
                  widths, h, fmap},
        out);
  if (g.mlp.fc1.db)
    unmap(*g.mlp.fc1.db,
          TensorMap{glu ? std::vector<std::string>{pre + "mlp.b1", pre + "mlp.b_up"} : std::vector<std::string>{pre + "mlp.b1"},
                    widths, 1, fmap},
          out);
  unmap(g.mlp.fc2.dw, TensorMap{{pre + "mlp.w2"}, {h}, ffn, {}}, out);
  if (g.mlp.fc2.db) unmap(*g.mlp.fc2.db, TensorMap{{pre + "mlp.b2"}, {h}, 1, {}}, out);
}

/// Dense masters by Gpt's names for layer `id`, as TransformerBlock::from_dense takes them.
inline BlockMasters<Eigen::MatrixXd> block_masters(const Masters& m, Index id) {
  const std::string pre = "layers." + std::to_string(id) + ".";
  const auto get = [&](const std::string& n) -> const Eigen::MatrixXd* {
    auto it = m.find(pre + n);
    return it == m.end() ? nullptr : &it->second;
  };
  const auto need = [&](const std::string& n) {
    if (!get(n)) throw ShapeError(shardalg::detail::cat("PipelineGpt: the masters have no tensor ", pre + n));
    return get(n);
  };
  return {need("ln1.gamma"), get("ln1.beta"),
          AttentionMasters<Eigen::MatrixXd>{need("attn.wq"), get("attn.bq"), need("attn.wk"), get("attn.bk"),
                                            need("attn.wv"), get("attn.bv"), need("attn.wo"), get("attn.bo")},
          need("ln2.gamma"), get("ln2.beta"),
          MlpMasters<Eigen::MatrixXd>{need("mlp.w1"), get("mlp.b1"), get("mlp.w_up"), get("mlp.b_up"), need("mlp.w2"),
                                      get("mlp.b2")}};
}

}  // namespace detail
}  // namespace shardalg::nn
