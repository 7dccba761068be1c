// shardalg/nn/layers/attention.hpp — causal self-attention, tensor-parallel by heads, with grouped-query
// attention (num_query_groups ≤ heads K/V heads).
//
//   forward   f: X[R];  X[R] · Wqkv[C] + bqkv[C] → QKV[C]       each rank owns whole heads
//             per (sequence, head): softmax(causal(Q Kᵀ/√d)) V   local → O[C]
//             O[C] · Wo[Row] → Partial;  g: all_reduce → Z[R];  + bo[R]
//   backward  dZ[R];  dO = dZ[R] · Woᵀ[C] → dO[C];  dWo = Oᵀ[Row] · dZ[R] → Row;  dbo → R
//             local attention adjoint → dQKV[C]
//             dX = dQKV[C] · Wqkvᵀ[Row] → Partial;  f's adjoint: all_reduce → dX[R]
//             dWqkv = Xᵀ[R] · dQKV[C] → C;  dbqkv → C
//   communication: one all_reduce of T·h forward (g), one backward (f).
//
// Attention dropout (cfg.dropout > 0, docs/layers/attention_dropout.md): O = (P ⊙ D)·V with
// D = mask/(1 − p), the mask keyed by (seed, layer, global sequence, global head, query, key)
// (AttnDropout in backend/cpu/kernels.hpp), so it is the same at every TP size; backward dV = (P ⊙ D)ᵀ·dO,
// dP = (dO·Vᵀ) ⊙ D. Local, no communication; the cache keeps P, the mask is recomputed.
//
// Context parallelism (set_context_parallel(cp)): the rows are this rank's chunks of every
// sequence (X[cp:Row], nn/layers/cp_tokens.hpp) and the core — softmax(causal(Q Kᵀ/√d)) V per
// local head — runs over the cp group, by the ring (K/V blocks passed around, ring_attention.hpp)
// or by all-to-all (heads for sequence, ulysses_attention.hpp); the projections are as above, on
// the tp group, and see only their tokens; attention dropout is the same mask. CPU backend.
//
// The fused QKV weight is column-parallel with Megatron's per-group layout: rank r's block is
// `units` × [q heads of the group | k | v]. With g query groups on P ranks:
//   g a multiple of P: each rank owns g/P groups and their heads/P query heads;
//   g a divisor of P:  each rank owns heads/P query heads and one copy of its group's K and V
//                      (replicated on P/g ranks). The K/V weight gradient of a replica is only
//                      its heads' contribution: backward all-reduces the K/V columns over the
//                      replicas (one extra all_reduce of (h + 1)·2·g·d, scope "kv_replica_sync"),
//                      so every copy gets the logical gradient and the copies stay equal.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <type_traits>

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/nn/layers/linear.hpp"
#include "shardalg/nn/layers/ring_attention.hpp"
#include "shardalg/nn/layers/ulysses_attention.hpp"

namespace shardalg::nn {

/// Tensor kind of the dropout on the attention probabilities (`tensor_id(layer, kind)`).
inline constexpr TensorKind attn_probs_dropout_kind = static_cast<TensorKind>(19);

struct AttentionConfig {
  Index hidden = 0;
  Index heads = 0;
  Index groups = 0;  // num_query_groups; 0 means heads (multi-head attention)
  Index seq = 0;     // sequence length: rows are batch × seq tokens, batch-major
  bool bias = true;
  double dropout = 0.0;  // attention dropout on the softmax probabilities (Megatron's attention_dropout)
  std::uint64_t dropout_seed = 0;
  std::uint32_t layer = 0;  // keys the attention-dropout mask
  [[nodiscard]] Index num_groups() const { return groups == 0 ? heads : groups; }
  [[nodiscard]] Index head_dim() const { return hidden / heads; }
};

/// How attention runs over a context-parallel group.
enum class CpAlgo { ring, all_to_all };

/// The physical layout of the fused QKV weight on p ranks.
struct QkvLayout {
  Index heads, groups, head_dim;
  int p;
  [[nodiscard]] bool replicated_kv() const { return groups < p; }
  [[nodiscard]] Index units() const { return std::max<Index>(groups / p, 1); }  // groups per rank
  [[nodiscard]] Index q_per_unit() const { return heads / std::max<Index>(groups, p); }
  [[nodiscard]] Index unit_width() const { return (q_per_unit() + 2) * head_dim; }
  [[nodiscard]] Index rank_width() const { return units() * unit_width(); }
  [[nodiscard]] Index width() const { return p * rank_width(); }
  /// The query group of unit u on rank r.
  [[nodiscard]] Index group_of(Index r, Index u) const { return replicated_kv() ? r / (p / groups) : r * units() + u; }
  /// Physical column → (0: Wq | 1: Wk | 2: Wv, logical column).
  LogicalCol operator()(Index c) const {
    const Index r = c / rank_width(), o = c % rank_width();
    const Index u = o / unit_width(), w = o % unit_width(), slot = w / head_dim, e = w % head_dim;
    const Index grp = group_of(r, u);
    if (slot < q_per_unit()) {
      const Index head = replicated_kv() ? r * q_per_unit() + slot : grp * q_per_unit() + slot;
      return {0, head * head_dim + e};
    }
    return {slot == q_per_unit() ? 1 : 2, grp * head_dim + e};
  }
};

/// Dense logical masters for Attention::from_dense (biases null when cfg.bias is false).
template <class M>
struct AttentionMasters {
  const M *wq, *bq;  // [h, heads·d], [1, heads·d]
  const M *wk, *bk;  // [h, groups·d]
  const M *wv, *bv;
  const M *wo, *bo;  // [heads·d, h], [1, h]
};

template <Element T, class B = CpuBackend>
class Attention {
 public:
  using Qkv = ColumnParallelLinear<T, B>;
  using Proj = RowParallelLinear<T, B>;
  using Input = Sharded<T, Replicated, B>;

  /// What the context-parallel core keeps for the backward: Q, K, V (unpacked) and its forward.
  struct CpCache {
    typename RingAttention<T>::Mat q, k, v;
    std::optional<typename RingAttention<T>::Forward> ring;
    std::optional<typename UlyssesAttention<T>::Forward> a2a;
  };
  struct Cache {
    typename Qkv::Cache qkv_in;
    Sharded<T, ColSharded, B> qkv;
    typename B::template matrix<T> probs;  // P; empty when recomputed (probs_dropped)
    typename Proj::Cache proj;
    std::shared_ptr<const CpCache> cp = nullptr;  // set under context parallelism (probs empty)
    bool probs_dropped = false;  // selective recomputation: P is recomputed from QKV in the backward
    // The backend's fused path (Kernels<B>::flash_attention: CUDA with cuDNN) keeps no P but the
    // per-row log-sum-exp L (float); its backward reads O from proj's cache.
    typename B::template matrix<float> lse{};
    bool fused = false;
  };
  struct Forward {
    Input z;
    Cache cache;
  };
  struct ParamGrads {
    typename Qkv::ParamGrads qkv;
    typename Proj::ParamGrads proj;
  };
  struct Grads {
    Input dx;
    ParamGrads params;
  };
  /// Sequence parallelism finishes the two ends itself (see nn/layers/sp_block.hpp):
  struct PartialForward {
    Sharded<T, Partial, B> z;  // O[C] · Wo[Row], before g and before the output bias
    Cache cache;
  };
  struct PartialGrads {
    Sharded<T, Partial, B> dx;  // dQKV[C] · Wqkvᵀ[Row], before f's all-reduce
    ParamGrads params;
  };

  /// Throws ShapeError / DivisibilityError naming the sizes.
  static QkvLayout check(const AttentionConfig& c, int p) {
    using detail::cat;
    if (c.heads <= 0 || c.hidden % c.heads != 0)
      throw ShapeError(cat("Attention: hidden size ", c.hidden, " is not divisible by ", c.heads, " heads"));
    if (c.heads % p != 0)
      throw DivisibilityError(cat("Attention: ", c.heads, " heads are not divisible by tensor-parallel size ", p));
    const Index g = c.num_groups();
    if (g <= 0 || c.heads % g != 0)
      throw ShapeError(cat("Attention: ", c.heads, " heads are not divisible by ", g, " query groups"));
    if (g % p != 0 && p % g != 0)
      throw DivisibilityError(cat("Attention: ", g, " query groups are neither a multiple nor a divisor of ",
                                  "tensor-parallel size ", p));
    if (c.seq <= 0) throw ShapeError(cat("Attention: sequence length ", c.seq, " must be positive"));
    if (!(c.dropout >= 0.0 && c.dropout < 1.0))
      throw ShapeError(cat("Attention: attention dropout ", c.dropout, " is outside [0, 1)"));
    return QkvLayout{c.heads, g, c.head_dim(), p};
  }

  static Attention init(const AttentionConfig& cfg, const Group& g, const InitConfig& ic) {
    const auto lay = check(cfg, g.size());
    const auto n = ic.normal();
    const std::uint64_t ids[3] = {ic.id(TensorKind::attn_q), ic.id(TensorKind::attn_k), ic.id(TensorKind::attn_v)};
    auto zero = [](Index) { return 0.0; };
    auto qkv = Qkv::make(cfg.hidden, lay.width(), cfg.bias, g,
                         [&](Index i, Index j) {
                           const auto lc = lay(j);
                           return n(ids[lc.part], i, lc.col);
                         },
                         zero, "Attention.qkv");
    const auto no = ic.scaled_output();
    auto proj = Proj::make(cfg.hidden, cfg.hidden, cfg.bias, g,
                           [&](Index i, Index j) { return no(ic.id(TensorKind::attn_proj), i, j); }, zero,
                           "Attention.proj");
    return Attention(cfg, lay, std::move(qkv), std::move(proj));
  }

  template <class M>
  static Attention from_dense(const AttentionConfig& cfg, const AttentionMasters<M>& m, const Group& g) {
    const auto lay = check(cfg, g.size());
    // Every master present as the config says and of its shape: d = hidden / heads (a head_dim
    // other than that is not supported), wq [h, heads·d], wk and wv [h, groups·d], wo [heads·d, h].
    constexpr std::string_view at = "Attention.from_dense";
    const Index h = cfg.hidden, qd = cfg.heads * cfg.head_dim(), kd = cfg.num_groups() * cfg.head_dim();
    detail::require_master(at, "wq", m.wq, true, h, qd);
    detail::require_master(at, "wk", m.wk, true, h, kd);
    detail::require_master(at, "wv", m.wv, true, h, kd);
    detail::require_master(at, "wo", m.wo, true, qd, h);
    detail::require_master(at, "bq", m.bq, cfg.bias, 1, qd);
    detail::require_master(at, "bk", m.bk, cfg.bias, 1, kd);
    detail::require_master(at, "bv", m.bv, cfg.bias, 1, kd);
    detail::require_master(at, "bo", m.bo, cfg.bias, 1, h);
    const M* w[3] = {m.wq, m.wk, m.wv};
    const M* b[3] = {m.bq, m.bk, m.bv};
    auto qkv = Qkv::make(cfg.hidden, lay.width(), cfg.bias, g,
                         [&](Index i, Index j) {
                           const auto lc = lay(j);
                           return (*w[lc.part])(i, lc.col);
                         },
                         [&](Index j) {
                           const auto lc = lay(j);
                           return (*b[lc.part])(0, lc.col);
                         },
                         "Attention.qkv");
    auto proj = Proj::make(cfg.hidden, cfg.hidden, cfg.bias, g, [&](Index i, Index j) { return (*m.wo)(i, j); },
                           [&](Index j) { return (*m.bo)(0, j); }, "Attention.proj");
    return Attention(cfg, lay, std::move(qkv), std::move(proj));
  }

  Attention(const AttentionConfig& cfg, const QkvLayout& lay, Qkv qkv, Proj proj)
      : cfg_(cfg), lay_(lay), qkv_(std::move(qkv)), proj_(std::move(proj)) {}

  [[nodiscard]] const AttentionConfig& config() const { return cfg_; }
  [[nodiscard]] const QkvLayout& layout() const { return lay_; }
  [[nodiscard]] const Qkv& qkv() const { return qkv_; }
  [[nodiscard]] const Proj& proj() const { return proj_; }
  Qkv& qkv() { return qkv_; }
  Proj& proj() { return proj_; }

  Forward forward(const Input& x) const {
    auto f = forward_partial(x);
    return {proj_.add_output_bias(reduce_from(std::move(f.z))), std::move(f.cache)};  // g → R; + bo
  }
  /// X[R] → Z[Partial]: everything but g and the output bias (added by proj().add_output_bias).
  PartialForward forward_partial(const Input& x) const {
    detail::require_cols("Attention", x.cols(), cfg_.hidden);
    if constexpr (std::is_same_v<B, CpuBackend>)  // (set_context_parallel refuses the others)
      if (cp_) return forward_partial_cp(x);
    if (x.rows() % cfg_.seq != 0)
      throw ShapeError(detail::cat("Attention: ", x.rows(), " rows are not a whole number of sequences of length ",
                                   cfg_.seq));
    auto f1 = qkv_.forward(x);  // f; X[R] · Wqkv[C] → QKV[C]
    const auto shape = attn_shape(x.rows());
    const auto drop = dropout(x.group());
    if constexpr (kernels_flash)
      if (!drop.active() && Kernels<B>::flash_supported(f1.y.local(), shape)) {  // no [s, s] block at all
        auto a = Kernels<B>::flash_attention(f1.y.local(), shape);
        Sharded<T, ColSharded, B> o(std::move(a.out), x.rows(), cfg_.hidden, x.group());
        auto f2 = proj_.forward_partial(o);  // O[C] · Wo[Row] → Partial
        Cache c{std::move(f1.cache), std::move(f1.y), {}, std::move(f2.cache)};
        c.lse = std::move(a.lse);
        c.fused = true;
        return {std::move(f2.z), std::move(c)};
      }
    auto a = drop.active() ? attention_dropped(f1.y.local(), shape, drop)
                           : Kernels<B>::causal_attention(f1.y.local(), shape);
    Sharded<T, ColSharded, B> o(std::move(a.out), x.rows(), cfg_.hidden, x.group());
    auto f2 = proj_.forward_partial(o);  // O[C] · Wo[Row] → Partial
    if (recompute_core_)  // keep QKV, drop the s × s probabilities: the backward recomputes them
      return {std::move(f2.z), Cache{std::move(f1.cache), std::move(f1.y), {}, std::move(f2.cache), nullptr, true}};
    return {std::move(f2.z), Cache{std::move(f1.cache), std::move(f1.y), std::move(a.probs), std::move(f2.cache)}};
  }

  Grads backward(const Cache& c, const Input& dz) const {
    auto g2 = proj_.backward(c.proj, dz);  // dO[C]
    auto g1 = qkv_.backward(c.qkv_in, attention_grad(c, g2.dh));  // f's adjoint: all_reduce → dX[R]
    if (lay_.replicated_kv()) sync_replicated_kv(g1.params);
    return {std::move(g1.dx), {std::move(g1.params), std::move(g2.params)}};
  }
  /// Overlap f's backward all-reduce with the QKV weight-gradient GEMM (ColumnParallelLinear).
  void set_overlap(OverlapConfig o) { qkv_.set_overlap(o); }
  /// dZ[R] (the whole cotangent) → dX[Partial] before f's all-reduce, and the parameter gradients.
  PartialGrads backward_partial(const Cache& c, const Input& dz) const {
    auto g2 = proj_.backward(c.proj, dz);  // dO[C]
    auto g1 = qkv_.backward_partial(c.qkv_in, attention_grad(c, g2.dh));  // dX[Partial]
    if (lay_.replicated_kv()) sync_replicated_kv(g1.params);
    return {std::move(g1.dx), {std::move(g1.params), std::move(g2.params)}};
  }

  /// dO[C] → dQKV[C]: the attention core's backward — the local heads' (no communication), or
  /// under context parallelism the ring's or the all-to-all's over cp. The split backward's B
  /// (nn/layers/split_backward.hpp) calls it too.
  Sharded<T, ColSharded, B> attention_grad(const Cache& c, const Sharded<T, ColSharded, B>& dout) const {
    if constexpr (std::is_same_v<B, CpuBackend>)
      if (c.cp) return attention_grad_cp(c, dout);
    const auto shape = attn_shape(dout.rows());
    if constexpr (kernels_flash)
      if (c.fused)  // dQKV from Q, K, V, O (proj's input), dO and L
        return {Kernels<B>::flash_attention_grad(c.qkv.local(), c.proj.h.local(), c.lse, dout.local(), shape),
                c.qkv.rows(), c.qkv.cols(), c.qkv.group()};
    const auto drop = dropout(dout.group());
    typename B::template matrix<T> recomputed;
    if (c.probs_dropped)  // selective recomputation: P again, from the cached QKV
      recomputed = std::move((drop.active() ? attention_dropped(c.qkv.local(), shape, drop)
                                            : Kernels<B>::causal_attention(c.qkv.local(), shape)).probs);
    const auto& probs = c.probs_dropped ? recomputed : c.probs;
    auto dqkv = [&] {
      if (!drop.active()) return Kernels<B>::causal_attention_grad(c.qkv.local(), probs, dout.local(), shape);
      if constexpr (kernels_drop) return Kernels<B>::causal_attention_grad(c.qkv.local(), probs, dout.local(), shape, drop);
      refuse_dropout();
      return Kernels<B>::causal_attention_grad(c.qkv.local(), probs, dout.local(), shape);
    }();
    return {std::move(dqkv), c.qkv.rows(), c.qkv.cols(), c.qkv.group()};
  }

  void sgd(const ParamGrads& g, T lr) {
    qkv_.sgd(g.qkv, lr);
    proj_.sgd(g.proj, lr);
  }

  /// Context parallelism over `cp` (see the file comment): every later forward takes this rank's
  /// chunks of every sequence, in cp_tokens.hpp's order (attention dropout keyed as the dense
  /// layer's). Throws DivisibilityError when the sequence does not split into 2·cp chunks.
  void set_context_parallel(Group cp, CpAlgo algo = CpAlgo::ring, bool overlap = true) {
    CpTokens::check(cfg_.seq, cp.size());
    if constexpr (!std::is_same_v<B, CpuBackend>) throw Error("Attention: context parallelism runs on the CPU backend only");
    cp_.emplace(CpState{std::move(cp), algo, overlap});
  }
  [[nodiscard]] const Group* context_parallel_group() const { return cp_ ? &cp_->group : nullptr; }

  /// Selective activation recomputation (Megatron's choice): the forward keeps Q, K, V but not the
  /// softmax probabilities P (b · heads/t · s² values, the largest term); the backward recomputes P
  /// from Q, K — the same kernel on the same inputs, the attention-dropout mask regenerated from its
  /// key — so the gradients are bit-identical to the stored run's. Under context parallelism the
  /// core keeps no P anyway (the ring recomputes it from the log-sum-exp).
  void set_recompute_core(bool on) { recompute_core_ = on; }
  [[nodiscard]] bool recompute_core() const { return recompute_core_; }

  /// The attention-dropout seed (vary it per step, as the hidden dropout's: nn/layers/block.hpp).
  void set_dropout_seed(std::uint64_t seed) { cfg_.dropout_seed = seed; }
  /// The global row of this rank's first token (data parallelism): its first sequence is
  /// row_base / seq of the whole batch.
  void set_dropout_row_base(Index base) { row_base_ = base; }
  /// The mask's key on group g: this rank's first query head and first sequence, globally.
  [[nodiscard]] AttnDropout dropout(const Group& g) const {
    if (cfg_.dropout == 0.0) return {};
    return {cfg_.dropout, cfg_.dropout_seed, tensor_id(cfg_.layer, attn_probs_dropout_kind), cfg_.heads,
            g.rank() * (cfg_.heads / g.size()), row_base_ / cfg_.seq};
  }

 private:
  AttnShape attn_shape(Index rows) const {
    return {rows / cfg_.seq, cfg_.seq, lay_.units(), lay_.q_per_unit(), lay_.head_dim};
  }
  /// Whether the backend's kernels take an AttnDropout (the CPU's do; a backend without the
  /// overloads, CUDA's today, refuses attention dropout instead of ignoring it).
  static constexpr bool kernels_drop = requires(const typename B::template matrix<T>& m, const AttnShape& s,
                                                const AttnDropout& d) {
    Kernels<B>::causal_attention(m, s, d);
    Kernels<B>::causal_attention_grad(m, m, m, s, d);
  };
  /// Whether the backend has a fused attention path (flash_attention / flash_attention_grad, taken
  /// when flash_supported says so; the CUDA backend linked with shardalg::cudnn).
  static constexpr bool kernels_flash = requires(const typename B::template matrix<T>& m, const AttnShape& s) {
    Kernels<B>::flash_supported(m, s);
    Kernels<B>::flash_attention(m, s);
  };
  static void refuse_dropout() {
    throw Error(detail::cat("Attention: attention dropout is not implemented for this backend's kernels (",
                            "nn::Kernels<Backend>::causal_attention with an AttnDropout); set it to 0"));
  }
  auto attention_dropped(const typename B::template matrix<T>& qkv, const AttnShape& s, const AttnDropout& d) const {
    if constexpr (kernels_drop) return Kernels<B>::causal_attention(qkv, s, d);
    else {
      refuse_dropout();
      return Kernels<B>::causal_attention(qkv, s);
    }
  }
  struct CpState {
    Group group;
    CpAlgo algo;
    bool overlap;
  };
  CpTokens cp_tokens(Index rows) const {
    const int cp = cp_->group.size();
    const Index per = 2 * (cfg_.seq / (2 * Index{cp}));  // rows of one sequence on one rank
    if (rows % per != 0)
      throw ShapeError(detail::cat("Attention: ", rows, " rows are not a whole number of sequences' chunks: ", per,
                                   " rows per sequence on each of ", cp, " context-parallel ranks (sequence length ", cfg_.seq, ")"));
    return {cfg_.seq, rows / per, cp, cp_->group.rank()};
  }
  RingAttentionConfig cp_config(const Group& tp) const {
    return {lay_.units() * lay_.q_per_unit(), lay_.units(), lay_.head_dim, cp_->overlap, dropout(tp)};
  }
  /// X[cp:Row] → Z[Partial] with the core over the cp group: QKV[C] unpacked to Q, K, V (units ×
  /// [q heads | k | v] → Q | K | V), the ring or the all-to-all, O[C] in the local heads' order.
  PartialForward forward_partial_cp(const Input& x) const {
    using Mat = typename RingAttention<T>::Mat;
    const CpTokens tok = cp_tokens(x.rows());
    auto f1 = qkv_.forward(x);  // f; X[R] · Wqkv[C] → QKV[C]
    const auto& qkv = f1.y.local();
    const Index n = qkv.rows(), d = lay_.head_dim, qn = lay_.q_per_unit() * d, uw = lay_.unit_width(), u = lay_.units();
    auto cc = std::make_shared<CpCache>();
    cc->q = Mat(n, u * qn);
    cc->k = Mat(n, u * d);
    cc->v = Mat(n, u * d);
    for (Index k = 0; k < u; ++k) {
      cc->q.middleCols(k * qn, qn) = qkv.middleCols(k * uw, qn);
      cc->k.middleCols(k * d, d) = qkv.middleCols(k * uw + qn, d);
      cc->v.middleCols(k * d, d) = qkv.middleCols(k * uw + qn + d, d);
    }
    Group cpg = cp_->group;
    Mat out;
    if (cp_->algo == CpAlgo::ring) {
      cc->ring = RingAttention<T>::forward(cpg, tok, cp_config(x.group()), cc->q, cc->k, cc->v);
      out = cc->ring->o;
    } else {
      cc->a2a = UlyssesAttention<T>::forward(cpg, tok, cp_config(x.group()), cc->q, cc->k, cc->v);
      out = cc->a2a->o;
    }
    Sharded<T, ColSharded, B> o(std::move(out), x.rows(), cfg_.hidden, x.group());
    auto f2 = proj_.forward_partial(o);  // O[C] · Wo[Row] → Partial
    return {std::move(f2.z), Cache{std::move(f1.cache), std::move(f1.y), {}, std::move(f2.cache), std::move(cc)}};
  }
  /// dO[C] → dQKV[C] through the cp core's backward (its messages on the cp group).
  Sharded<T, ColSharded, B> attention_grad_cp(const Cache& c, const Sharded<T, ColSharded, B>& dout) const {
    using Mat = typename RingAttention<T>::Mat;
    const CpTokens tok = cp_tokens(dout.rows());
    Group cpg = cp_->group;
    const CpCache& cc = *c.cp;
    const auto gr = cc.ring ? RingAttention<T>::backward(cpg, tok, cp_config(dout.group()), cc.q, cc.k, cc.v, *cc.ring, dout.local())
                            : UlyssesAttention<T>::backward(cpg, tok, cp_config(dout.group()), *cc.a2a, dout.local());
    const Index n = dout.rows(), d = lay_.head_dim, qn = lay_.q_per_unit() * d, uw = lay_.unit_width(), u = lay_.units();
    Mat dqkv(n, u * uw);
    for (Index k = 0; k < u; ++k) {
      dqkv.middleCols(k * uw, qn) = gr.dq.middleCols(k * qn, qn);
      dqkv.middleCols(k * uw + qn, d) = gr.dk.middleCols(k * d, d);
      dqkv.middleCols(k * uw + qn + d, d) = gr.dv.middleCols(k * d, d);
    }
    return {std::move(dqkv), c.qkv.rows(), c.qkv.cols(), c.qkv.group()};
  }

  /// Sum the K/V weight (and bias) gradient columns over the ranks that hold copies of a group.
  void sync_replicated_kv(typename Qkv::ParamGrads& pg) const {
    using Mat = typename B::template matrix<T>;
    Group grp = pg.dw.group();
    auto scope = shardalg::scope(grp, "kv_replica_sync");
    const Index h = cfg_.hidden, d = lay_.head_dim, kv0 = lay_.q_per_unit() * d, g = lay_.group_of(grp.rank(), 0);
    const Index rows = h + (pg.db ? 1 : 0);
    Mat buf = B::template zeros<T>(rows, lay_.groups * 2 * d);
    Kernels<B>::place(buf, 0, g * 2 * d, B::copy_block(pg.dw.local(), 0, kv0, h, 2 * d));
    if (pg.db) Kernels<B>::place(buf, h, g * 2 * d, B::copy_block(pg.db->local(), 0, kv0, 1, 2 * d));
    auto sum = all_reduce(Sharded<T, Partial, B>(std::move(buf), rows, lay_.groups * 2 * d, grp));
    Kernels<B>::place(pg.dw.local(), 0, kv0, B::copy_block(sum.local(), 0, g * 2 * d, h, 2 * d));
    if (pg.db) Kernels<B>::place(pg.db->local(), 0, kv0, B::copy_block(sum.local(), h, g * 2 * d, 1, 2 * d));
  }

  AttentionConfig cfg_;
  QkvLayout lay_;
  Qkv qkv_;
  Proj proj_;
  Index row_base_ = 0;
  std::optional<CpState> cp_;
  bool recompute_core_ = false;
};

}  // namespace shardalg::nn
