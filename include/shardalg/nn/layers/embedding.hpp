// shardalg/nn/layers/embedding.hpp — the vocabulary-parallel embedding E[v_padded, h] and the tied
// output projection (the LM head). E is RowSharded: rank r owns its block of vocabulary rows
// (r·v_padded/P … (r+1)·v_padded/P when P divides v_padded).
//
// Lookup (ids: T token ids, the same on every rank)
//   forward   ids → masked local lookup in E[Row] → Y[Partial]  (rows of other ranks' tokens are 0)
//             all_reduce → Y[R]                              1 all_reduce of T·h
//             sequence parallel: reduce_scatter → Y[Row]     1 reduce_scatter of T·h
//   backward  dY[R] → dE[Row] by a local scatter-add of dY's rows into the rows this rank owns
//             (all_reduce's adjoint is the identity)         no communication
//             sequence parallel: dY[Row] → all_gather (reduce_scatter's adjoint) → dY[R], then the
//             same local scatter-add                         1 all_gather of T·h
//
// Tied output projection (logits over the vocabulary)
//   forward   f: X[R] → X[R];  X[R] · transpose(E)[C] → logits[T, v_padded][C]   no communication
//             sequence parallel: all_gather X[Row] → X[R] first  1 all_gather of T·h
//   backward  dX = dlogits[C] · E[Row] → dX[Partial];  f's adjoint all_reduce → dX[R]   1 all_reduce of T·h
//             (sequence parallel: reduce_scatter → dX[Row], 1 reduce_scatter of T·h)
//             dE = transpose(dlogits)[Row] · X[R] → dE[Row]          local
//   The tied weight's gradient is the sum of the two Row gradients (lookup + head), local.
//
// Padding: v_padded is a multiple of divisor·P (Megatron's make-vocab-size-divisible-by, via
// cost::padded_vocab_size), or with divisor 0 the vocabulary itself: E[vocab, h] in balanced
// blocks (base/blocks.hpp; GPT-2's 50257 on 3 ranks: 16753, 16752, 16752). Either way a rank owns
// the rows [vocab_start, vocab_end). Pad rows are zero, never looked up (ids must be < vocab), and the
// cross-entropy (nn/layers/cross_entropy.hpp) masks their logits out of the softmax, so their gradient
// stays zero. Real rows are initialised from (seed, tensor, global row, column), so E at TP=k
// equals E at TP=1 on every real row, bit for bit, whatever the padding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/conjugates.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/cost/parallel_config.hpp"
#include "shardalg/nn/layers/init.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

/// Tensor kind of the word embedding for `tensor_id(layer, kind)` (the layer kinds in
/// backend/random.hpp stop below 24).
inline constexpr TensorKind word_embedding_kind = TensorKind::word_embedding;

/// The padded vocabulary: the smallest multiple of divisor·tp that holds `vocab` (50257, 128, 8 →
/// 51200); divisor 0: no padding, the vocabulary itself in balanced blocks (50257 on 3 ranks:
/// 16753, 16752, 16752 rows). Throws ShapeError for a vocabulary below 1 or a negative divisor.
inline Index padded_vocab(Index vocab, Index divisor, int tp) {
  if (vocab < 1) throw ShapeError(shardalg::detail::cat("vocabulary size ", vocab, " must be at least 1"));
  if (divisor < 0)
    throw ShapeError(shardalg::detail::cat("vocabulary divisor ", divisor, " must be 0 (no padding) or at least 1"));
  if (divisor == 0) return vocab;
  Index m = 0, top = 0;
  if (__builtin_mul_overflow(divisor, static_cast<Index>(tp), &m) || __builtin_add_overflow(vocab, m - 1, &top))
    throw ShapeError(shardalg::detail::cat("vocabulary ", vocab, " padded to a multiple of divisor ", divisor,
                                           " × tensor-parallel size ", tp, " overflows 64-bit sizes"));
  return static_cast<Index>(cost::padded_vocab_size(vocab, divisor, tp));
}

/// Local kernels of the embedding (a backend specialises this; the CPU one is below).
template <class Backend>
struct EmbeddingKernels;

template <>
struct EmbeddingKernels<CpuBackend> {
  template <class T>
  using M = CpuBackend::matrix<T>;

  /// Y[t, :] = E_local[ids[t] − v0, :] when this rank owns ids[t], else 0.
  template <class T>
  static M<T> masked_lookup(const M<T>& e, std::span<const std::int64_t> ids, Index v0) {
    M<T> y = M<T>::Zero(static_cast<Index>(ids.size()), e.cols());
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const Index i = static_cast<Index>(ids[t]) - v0;
      if (i >= 0 && i < e.rows()) y.row(static_cast<Index>(t)) = e.row(i);
    }
    return y;
  }
  /// dE_local[ids[t] − v0, :] += dY[t, :] for the tokens this rank owns.
  template <class T>
  static M<T> scatter_add(Index local_rows, const M<T>& dy, std::span<const std::int64_t> ids, Index v0) {
    M<T> de = M<T>::Zero(local_rows, dy.cols());
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const Index i = static_cast<Index>(ids[t]) - v0;
      if (i >= 0 && i < local_rows) de.row(i) += dy.row(static_cast<Index>(t));
    }
    return de;
  }
};

template <Element T, class B = CpuBackend>
class VocabParallelEmbedding {
 public:
  using Weight = Sharded<T, RowSharded, B>;  // E[v_padded, h]

  struct Cache {
    std::vector<std::int64_t> ids;
  };
  struct Forward {
    Sharded<T, Replicated, B> y;  // [T, h]
    Cache cache;
  };
  struct ForwardSP {
    Sharded<T, RowSharded, B> y;  // [T, h], tokens split
    Cache cache;
  };
  struct ParamGrads {
    Weight de;  // dE[Row], local
  };

  struct HeadCache {
    Sharded<T, Replicated, B> x;  // the (gathered) input of the head
  };
  struct HeadForward {
    Sharded<T, ColSharded, B> logits;  // [T, v_padded]
    HeadCache cache;
  };
  struct HeadPartialGrads {
    Sharded<T, Partial, B> dx;  // before f's all-reduce
    ParamGrads params;
  };
  struct HeadGrads {
    Sharded<T, Replicated, B> dx;
    ParamGrads params;
  };
  struct HeadGradsSP {
    Sharded<T, RowSharded, B> dx;
    ParamGrads params;
  };

  /// Adopt a weight E[v_padded, h][Row] whose first `vocab` rows are the real vocabulary.
  VocabParallelEmbedding(Weight e, Index vocab, std::string name = "VocabParallelEmbedding")
      : e_(std::move(e)), vocab_(vocab), name_(std::move(name)) {
    check_padding(name_, vocab_, e_.rows(), e_.size());
  }

  /// E[i, j] := f(i, j) for the real rows i < vocab, 0 for the pad rows; v_padded is the
  /// smallest multiple of divisor·P holding vocab.
  template <class F>
  static VocabParallelEmbedding make(Index vocab, Index hidden, const Group& g, F f, Index divisor = 128,
                                     std::string name = "VocabParallelEmbedding") {
    return make_padded(vocab, padded_vocab(vocab, divisor, g.size()), hidden, g, f, std::move(name));
  }
  /// The same with an explicit padded size (e.g. a checkpoint's); checked against P.
  template <class F>
  static VocabParallelEmbedding make_padded(Index vocab, Index padded, Index hidden, const Group& g, F f,
                                            std::string name = "VocabParallelEmbedding") {
    check_padding(name, vocab, padded, g.size());
    auto e = from_global<T, RowSharded, B>(padded, hidden, g,
                                           [&](Index i, Index j) { return i < vocab ? static_cast<double>(f(i, j)) : 0.0; });
    return VocabParallelEmbedding(std::move(e), vocab, std::move(name));
  }
  /// normal(0, std) keyed by (seed, tensor, global row, column): TP-invariant.
  static VocabParallelEmbedding init(Index vocab, Index hidden, const Group& g, NormalInit init,
                                     std::uint64_t tensor = tensor_id(0, word_embedding_kind), Index divisor = 128) {
    return make(vocab, hidden, g, [&](Index i, Index j) { return init(tensor, i, j); }, divisor);
  }
  /// Shard a dense master E[vocab, h] (unpadded), padding it with zero rows.
  template <class M>
  static VocabParallelEmbedding from_dense(const M& e, const Group& g, Index divisor = 128) {
    return make(e.rows(), e.cols(), g, [&](Index i, Index j) { return e(i, j); }, divisor);
  }

  [[nodiscard]] Index vocab_size() const { return vocab_; }
  [[nodiscard]] Index padded_vocab_size() const { return e_.rows(); }
  [[nodiscard]] Index hidden() const { return e_.cols(); }
  /// The vocabulary rows [vocab_start, vocab_end) this rank owns (padded indices).
  [[nodiscard]] Index vocab_start() const { return e_.row_offset(); }
  [[nodiscard]] Index vocab_end() const { return e_.row_offset() + e_.local_rows(); }
  [[nodiscard]] const Weight& weight() const { return e_; }
  Weight& weight() { return e_; }
  [[nodiscard]] const std::string& name() const { return name_; }

  // ---- lookup ----------------------------------------------------------------------------

  /// ids → Y[Partial]: the masked local lookup, before any reduction. No communication.
  [[nodiscard]] Sharded<T, Partial, B> lookup(std::span<const std::int64_t> ids) const {
    check_ids(ids);
    return Sharded<T, Partial, B>(EmbeddingKernels<B>::template masked_lookup<T>(e_.local(), ids, vocab_start()),
                                  static_cast<Index>(ids.size()), hidden(), e_.group());
  }
  /// ids → Y[R]: lookup, then one all_reduce of T·h.
  [[nodiscard]] Forward forward(std::span<const std::int64_t> ids) const {
    auto yp = lookup(ids);
    return {all_reduce(std::move(yp)), Cache{{ids.begin(), ids.end()}}};
  }
  /// ids → Y[Row] (sequence parallel): lookup, then one reduce_scatter of T·h.
  [[nodiscard]] ForwardSP forward_sp(std::span<const std::int64_t> ids) const {
    auto yp = lookup(ids);
    return {reduce_scatter<RowSharded>(yp), Cache{{ids.begin(), ids.end()}}};
  }
  /// dY[R] → dE[Row]: local scatter-add, no communication.
  [[nodiscard]] ParamGrads backward(const Cache& c, const Sharded<T, Replicated, B>& dy) const {
    check_dy(c, dy.rows(), dy.cols());
    // all_reduce's adjoint is the identity: dY[R] reaches every summand as it is.
    return {Weight(EmbeddingKernels<B>::template scatter_add<T>(e_.local_rows(), dy.local(), c.ids, vocab_start()),
                   e_.rows(), e_.cols(), e_.group())};
  }
  /// dY[Row] → dE[Row]: reduce_scatter's adjoint (one all_gather of T·h), then the scatter-add.
  [[nodiscard]] ParamGrads backward_sp(const Cache& c, const Sharded<T, RowSharded, B>& dy) const {
    check_dy(c, dy.rows(), dy.cols());
    return backward(c, adjoint::reduce_scatter(dy));
  }

  // ---- tied output projection (LM head) ----------------------------------------------------

  /// X[R] → logits[C] = X · Eᵀ over the padded vocabulary; no communication.
  [[nodiscard]] HeadForward logits(const Sharded<T, Replicated, B>& x) const {
    check_x(x.cols());
    Sharded<T, Replicated, B> xf = copy_to(x);            // f: identity forward
    Sharded<T, ColSharded, B> z = matmul(xf, transpose(e_));  // R · transpose(Row) = R · C → C
    return {std::move(z), HeadCache{x}};
  }
  /// X[Row] → logits[C] (sequence parallel): one all_gather of T·h first.
  [[nodiscard]] HeadForward logits_sp(const Sharded<T, RowSharded, B>& x) const {
    check_x(x.cols());
    return logits(all_gather(x));
  }
  /// dlogits[C] → dX[Partial], dE[Row]; no communication.
  [[nodiscard]] HeadPartialGrads logits_backward_partial(const HeadCache& c, const Sharded<T, ColSharded, B>& dz) const {
    if (dz.rows() != c.x.rows() || dz.cols() != e_.rows())
      throw ShapeError(shardalg::detail::cat(name_, ": logit gradient is ", dz.rows(), "x", dz.cols(), ", expected ",
                                             c.x.rows(), "x", e_.rows()));
    Sharded<T, Partial, B> dx = matmul(dz, e_);             // C · Row → Partial
    Weight de = matmul(transpose(dz), c.x);                  // transpose(C) · R = Row · R → Row
    return {std::move(dx), {std::move(de)}};
  }
  /// dlogits[C] → dX[R] (f's adjoint: one all_reduce of T·h), dE[Row].
  [[nodiscard]] HeadGrads logits_backward(const HeadCache& c, const Sharded<T, ColSharded, B>& dz) const {
    auto g = logits_backward_partial(c, dz);
    return {adjoint::copy_to(std::move(g.dx)), std::move(g.params)};
  }
  /// dlogits[C] → dX[Row] (all_gather's adjoint on a Partial cotangent: one reduce_scatter of
  /// T·h), dE[Row].
  [[nodiscard]] HeadGradsSP logits_backward_sp(const HeadCache& c, const Sharded<T, ColSharded, B>& dz) const {
    auto g = logits_backward_partial(c, dz);
    return {adjoint::all_gather<RowSharded>(g.dx), std::move(g.params)};
  }

  void sgd(const ParamGrads& g, T lr) { sgd_update(e_, g.de, lr); }

  /// Throws unless v_padded ≥ vocab ≥ 1 (any v_padded splits: balanced blocks, base/blocks.hpp).
  static void check_padding(std::string_view name, Index vocab, Index padded, int) {
    if (vocab < 1) throw ShapeError(shardalg::detail::cat(name, ": vocabulary size ", vocab, " must be at least 1"));
    if (padded < vocab)
      throw ShapeError(shardalg::detail::cat(name, ": padded vocabulary ", padded, " is smaller than vocabulary ", vocab));
  }

 private:
  void check_ids(std::span<const std::int64_t> ids) const {
    for (const auto id : ids)
      if (id < 0 || id >= vocab_)
        throw IndexError(shardalg::detail::cat(name_, ": token id ", id, " is out of range for vocabulary ", vocab_));
  }
  void check_dy(const Cache& c, Index rows, Index cols) const {
    if (rows != static_cast<Index>(c.ids.size()) || cols != hidden())
      throw ShapeError(shardalg::detail::cat(name_, ": output gradient is ", rows, "x", cols, ", expected ",
                                             c.ids.size(), "x", hidden()));
  }
  void check_x(Index cols) const {
    if (cols != hidden())
      throw ShapeError(shardalg::detail::cat(name_, ": head input has ", cols, " columns, expected ", hidden()));
  }

  Weight e_;
  Index vocab_;
  std::string name_;
};

}  // namespace shardalg::nn
