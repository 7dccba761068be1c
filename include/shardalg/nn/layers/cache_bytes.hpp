// shardalg/nn/layers/cache_bytes.hpp — what a block keeps for its backward, in bytes, by term: the
// sizes of the matrices its cache actually holds (rows × cols × element size), not a formula.
// nn::Gpt counts its blocks' caches with it when asked (Gpt::measure_activations);
// nn/train/measured_memory.hpp adds the tensors outside the blocks and sets them beside the formulas.
#pragma once

#include <cstddef>

namespace shardalg::nn {

/// Bytes per rank of the activations held for the backward, by what holds them.
struct ActivationTerms {
  // inside the L layers (summed over the layers)
  double norm_xhat = 0;
  double norm_rstd = 0;
  double qkv_input = 0;
  double qkv = 0;
  double scores = 0;
  double proj_input = 0;
  double fc1_input = 0;
  double fc1_output = 0;
  double fc2_input = 0;
  double cp_attention = 0;  // context parallelism: the attention core's Q, K, V (unpacked), O and log-sum-exp
  double block_input = 0;   // full recomputation: each block's input, the only thing it keeps
  // outside the layers
  double embedding_ids = 0;     // the token ids the embedding's backward scatters into (int64)
  double embedding_output = 0;  // the embedding's output, alive until the backward ends
  double stream = 0;            // the last block's output
  double final_norm_output = 0;
  double final_norm_cache = 0;  // x̂ and 1/σ
  double head_input = 0;        // the LM head's cached input (gathered under SP)
  double logits = 0;            // [T, v_padded/t]
  double loss_probs = 0;        // the loss's softmax [T, v_padded/t]
  double loss_tokens = 0;       // per-token losses (e), targets (int64) and active flags (char)

  [[nodiscard]] double layers() const {
    return norm_xhat + norm_rstd + qkv_input + qkv + scores + proj_input + fc1_input + fc1_output + fc2_input + cp_attention +
           block_input;
  }
  [[nodiscard]] double outside() const {
    return embedding_ids + embedding_output + stream + final_norm_output + final_norm_cache + head_input + logits +
           loss_probs + loss_tokens;
  }
  [[nodiscard]] double total() const { return layers() + outside(); }
};

namespace detail {
template <class M>
double matrix_bytes(const M& m) {
  return static_cast<double>(m.rows()) * static_cast<double>(m.cols()) * sizeof(typename M::Scalar);
}
template <class S>
double local_bytes(const S& s) {
  return matrix_bytes(s.local());
}
template <class V>
double vector_bytes(const V& v) {
  return static_cast<double>(v.size()) * sizeof(typename V::value_type);
}
/// The caches of one block, plain or sequence-parallel (the same field names).
template <class C>
void add_block_cache(ActivationTerms& a, const C& c) {
  a.norm_xhat += local_bytes(c.ln1.xhat) + local_bytes(c.ln2.xhat);
  a.norm_rstd += matrix_bytes(c.ln1.rstd) + matrix_bytes(c.ln2.rstd);
  a.qkv_input += local_bytes(c.attn.qkv_in.x);
  a.qkv += local_bytes(c.attn.qkv);
  a.scores += matrix_bytes(c.attn.probs);
  a.proj_input += local_bytes(c.attn.proj.h);
  a.fc1_input += local_bytes(c.mlp.fc1.x);
  a.fc1_output += local_bytes(c.mlp.h);
  a.fc2_input += local_bytes(c.mlp.fc2.h);
  if (c.input) a.block_input += local_bytes(*c.input);
  if (const auto& cp = c.attn.cp) {
    a.cp_attention += matrix_bytes(cp->q) + matrix_bytes(cp->k) + matrix_bytes(cp->v);
    if (cp->ring) a.cp_attention += matrix_bytes(cp->ring->o) + matrix_bytes(cp->ring->lse);
    if (cp->a2a) {
      const auto& u = cp->a2a->cache;
      a.cp_attention += matrix_bytes(cp->a2a->o) + matrix_bytes(u.q) + matrix_bytes(u.k) + matrix_bytes(u.v) +
                        matrix_bytes(u.local.o) + matrix_bytes(u.local.lse);
    }
  }
}
}  // namespace detail

}  // namespace shardalg::nn
