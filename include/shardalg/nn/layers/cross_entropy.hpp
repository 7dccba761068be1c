// shardalg/nn/layers/cross_entropy.hpp — the fused vocabulary-parallel cross-entropy on logits[T, v][C]
// (v = the padded vocabulary; columns ≥ vocab are padding and are never predicted).
//
//   forward   m_r = max over this rank's real columns                  [T] per rank
//             all_reduce(max) → m[R]                                    1 all_reduce of T values
//             e = exp(logits − m) on real columns (0 on pad columns)
//             packed[T, k] = (Σ_j e_j, logit of the target if this rank owns it else 0
//                             [, Σ_j logit_j over real columns when label smoothing > 0])  [Partial]
//             all_reduce(sum) → packed[R]                              1 all_reduce of k·T values
//             lse = m + log Σe;  loss_t = lse − (1−ε)·x_target − ε·(Σ_j x_j)/V      [T, 1][R]
//             k = 2 without label smoothing, 3 with it: 2 all-reduces in all, 3·T or 4·T values.
//   backward  dlogits_tj = g_t · (p_tj − (1−ε)·[j = target_t] − ε/V)  on real columns, 0 on pad
//             columns, p = e / Σe kept from the forward: each rank its own columns, no
//             communication. g_t is the upstream gradient of token t's loss (1/count for the mean).
//
// ignore_index: tokens with that target have loss 0 and gradient 0; the mean divides by the
// number of other tokens (0 when there are none).
//
// Label smoothing ε (PyTorch's `label_smoothing`, CrossEntropyLoss): the target distribution is
// q = (1−ε)·onehot + ε/V, ε spread evenly over all V classes, the target included; loss_t =
// −Σ_j q_j log p_j = (1−ε)·nll − ε·mean_j log p_j, and mean_j log p_j = (Σ_j x_j)/V − lse, which
// is why Σ_j x_j rides in the same sum all-reduce. V is the *global* real vocabulary (pad columns
// excluded) and the mean runs over the global vocabulary. Megatron-LM's ε spreads over the other
// V − 1 classes only (the target keeps 1 − ε_M): Megatron's ε_M is ε = ε_M·V/(V−1) here.
// (Passing Megatron's value where PyTorch's is meant is off by the factor V/(V−1).) Megatron-LM's vocab-parallel loss also uses the local
// partition size for V and the mean over the local partition, which is only right at TP=1
// (tests/gpt/test_vocab_parallel.cpp shows the difference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg::nn {

/// Local kernels of the fused cross-entropy (a backend specialises this; the CPU one is below).
/// `c0` is the global index of the block's first column; columns with global index ≥ vocab are
/// padding.
template <class Backend>
struct CrossEntropyKernels;

/// 16-bit elements (bf16, fp16) are storage only: each kernel computes in fp32 and rounds each
/// output once (the packed sums too, before their all-reduce).
template <>
struct CrossEntropyKernels<CpuBackend> {
  template <class T>
  using M = CpuBackend::matrix<T>;

  /// [T, 1]: max over the real columns of the block (−inf when the block is all padding).
  template <class T>
  static M<T> local_max(const M<T>& x, Index c0, Index vocab) {
    const Index n = std::clamp<Index>(vocab - c0, 0, x.cols());
    M<T> m(x.rows(), 1);
    for (Index i = 0; i < x.rows(); ++i)
      m(i, 0) = n > 0 ? x.row(i).head(n).maxCoeff() : -std::numeric_limits<T>::infinity();
    return m;
  }

  /// e = exp(x − m) on real columns, 0 on pad columns; and the packed summands [T, k]:
  /// (Σ e, x[target] if owned else 0 [, Σ x over real columns]).
  template <class T>
  static std::pair<M<T>, M<T>> exp_and_sums(const M<T>& x, const M<T>& m, std::span<const std::int64_t> targets,
                                            Index c0, Index vocab, int k) {
    if constexpr (HostHalf<T>) {
      const auto [e, s] = exp_and_sums<float>(x.template cast<float>(), m.template cast<float>(), targets, c0, vocab, k);
      return {e.template cast<T>(), s.template cast<T>()};
    } else {
      return exp_and_sums_fp(x, m, targets, c0, vocab, k);
    }
  }

  /// p = e / Σe, row by row, in place.
  template <class T>
  static void normalise(M<T>& e, const M<T>& sums) {
    if constexpr (HostHalf<T>) {
      M<float> ef = e.template cast<float>();
      normalise<float>(ef, sums.template cast<float>());
      e = ef.template cast<T>();
    } else {
      for (Index i = 0; i < e.rows(); ++i) e.row(i) /= sums(i, 0);
    }
  }

  /// [T, 1] losses from the reduced statistics; 0 where `active` is false.
  template <class T>
  static M<T> losses(const M<T>& m, const M<T>& sums, const std::vector<char>& active, T eps, Index vocab) {
    if constexpr (HostHalf<T>)
      return losses<float>(m.template cast<float>(), sums.template cast<float>(), active, static_cast<float>(eps), vocab)
          .template cast<T>();
    else
      return losses_fp(m, sums, active, eps, vocab);
  }

  /// dlogits = g_t · (p − (1−ε)·onehot − ε/V) on real columns, 0 on pad columns.
  template <class T>
  static M<T> grad(const M<T>& p, std::span<const std::int64_t> targets, const M<T>& g, Index c0, Index vocab, T eps) {
    if constexpr (HostHalf<T>)
      return grad<float>(p.template cast<float>(), targets, g.template cast<float>(), c0, vocab, static_cast<float>(eps))
          .template cast<T>();
    else
      return grad_fp(p, targets, g, c0, vocab, eps);
  }

 private:
  template <class T>
  static std::pair<M<T>, M<T>> exp_and_sums_fp(const M<T>& x, const M<T>& m, std::span<const std::int64_t> targets,
                                               Index c0, Index vocab, int k) {
    const Index n = std::clamp<Index>(vocab - c0, 0, x.cols());
    M<T> e = M<T>::Zero(x.rows(), x.cols());
    M<T> s = M<T>::Zero(x.rows(), k);
    for (Index i = 0; i < x.rows(); ++i) {
      if (n > 0) {
        e.row(i).head(n) = (x.row(i).head(n).array() - m(i, 0)).exp().matrix();
        s(i, 0) = e.row(i).head(n).sum();
        if (k == 3) s(i, 2) = x.row(i).head(n).sum();
      }
      const Index t = static_cast<Index>(targets[static_cast<std::size_t>(i)]) - c0;
      if (t >= 0 && t < n) s(i, 1) = x(i, t);
    }
    return {std::move(e), std::move(s)};
  }

  template <class T>
  static M<T> losses_fp(const M<T>& m, const M<T>& sums, const std::vector<char>& active, T eps, Index vocab) {
    M<T> l(m.rows(), 1);
    for (Index i = 0; i < m.rows(); ++i) {
      if (!active[static_cast<std::size_t>(i)]) {
        l(i, 0) = T(0);
        continue;
      }
      const T lse = m(i, 0) + std::log(sums(i, 0));
      T v = lse - (T(1) - eps) * sums(i, 1);
      if (sums.cols() == 3) v -= eps * sums(i, 2) / static_cast<T>(vocab);
      l(i, 0) = v;
    }
    return l;
  }

  template <class T>
  static M<T> grad_fp(const M<T>& p, std::span<const std::int64_t> targets, const M<T>& g, Index c0, Index vocab, T eps) {
    const Index n = std::clamp<Index>(vocab - c0, 0, p.cols());
    M<T> d = M<T>::Zero(p.rows(), p.cols());
    const T smooth = eps / static_cast<T>(vocab);
    for (Index i = 0; i < p.rows(); ++i) {
      const T gi = g(i, 0);
      if (gi == T(0) || n == 0) continue;
      d.row(i).head(n) = gi * (p.row(i).head(n).array() - smooth).matrix();
      const Index t = static_cast<Index>(targets[static_cast<std::size_t>(i)]) - c0;
      if (t >= 0 && t < n) d(i, t) -= gi * (T(1) - eps);
    }
    return d;
  }
};

/// Options of the loss, as PyTorch's CrossEntropyLoss names them: label_smoothing ε ∈ [0, 1)
/// gives the target 1 − ε + ε/V and every other class ε/V (PyTorch's definition; Megatron-LM's
/// ε_M corresponds to ε = ε_M·V/(V−1)).
struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

template <Element T, class B = CpuBackend>
class VocabParallelCrossEntropy {
 public:
  using Logits = Sharded<T, ColSharded, B>;     // [T, v_padded]
  using Losses = Sharded<T, Replicated, B>;     // [T, 1]

  struct Cache {
    Logits probs;                           // softmax over the real vocabulary, this rank's columns
    std::vector<std::int64_t> targets;
    std::vector<char> active;               // target != ignore_index
    Index count = 0;                        // number of active tokens
  };
  struct Forward {
    Losses losses;  // per-token losses, 0 for ignored tokens
    T mean;         // Σ losses / count (0 when count = 0)
    Index count;
    Cache cache;
  };

  /// `vocab` is the real vocabulary size; logit columns ≥ vocab are padding.
  explicit VocabParallelCrossEntropy(Index vocab, CrossEntropyOptions opt = {},
                                     std::string name = "VocabParallelCrossEntropy")
      : vocab_(vocab), opt_(opt), name_(std::move(name)) {
    if (vocab_ < 1)
      throw ShapeError(shardalg::detail::cat(name_, ": vocabulary size ", vocab_, " must be at least 1"));
    if (!(opt_.label_smoothing >= 0.0 && opt_.label_smoothing < 1.0))
      throw ShapeError(shardalg::detail::cat(name_, ": label smoothing ", opt_.label_smoothing, " is not in [0, 1)"));
  }

  [[nodiscard]] Index vocab_size() const { return vocab_; }
  [[nodiscard]] const CrossEntropyOptions& options() const { return opt_; }
  /// ε, the weight of the uniform part of the target distribution, q = (1−ε)·onehot + ε/V (the
  /// option itself, PyTorch's label_smoothing).
  [[nodiscard]] double smoothing_coefficient() const { return opt_.label_smoothing; }
  /// Values per token in the sum all-reduce: 2, or 3 with label smoothing.
  [[nodiscard]] int packed_values() const { return opt_.label_smoothing > 0.0 ? 3 : 2; }

  /// logits[C] and T targets (the same on every rank) → per-token losses[R] and their mean.
  /// Two all-reduces: max of T values, sum of packed_values()·T values.
  [[nodiscard]] Forward forward(const Logits& logits, std::span<const std::int64_t> targets) const {
    check(logits, targets);  // every rank checks the same values before any communication
    using K = CrossEntropyKernels<B>;
    const Index t = logits.rows();
    const Index c0 = logits.col_offset();
    Group g = logits.group();

    auto m = K::template local_max<T>(logits.local(), c0, vocab_);
    g.all_reduce(m.data(), static_cast<std::size_t>(t), ReduceOp::max, CallInfo{"Partial(max)", "R"});

    const int k = packed_values();
    auto [e, part] = K::template exp_and_sums<T>(logits.local(), m, targets, c0, vocab_, k);
    Sharded<T, Replicated, B> sums = all_reduce(Sharded<T, Partial, B>(std::move(part), t, k, g));  // k·T values

    Cache c;
    c.targets.assign(targets.begin(), targets.end());
    c.active.resize(targets.size());
    for (std::size_t i = 0; i < targets.size(); ++i) {
      c.active[i] = targets[i] != opt_.ignore_index;
      c.count += c.active[i];
    }
    const T eps = static_cast<T>(smoothing_coefficient());
    auto l = K::template losses<T>(m, sums.local(), c.active, eps, vocab_);
    T mean = T(0);  // 16-bit losses summed in fp32, the mean rounded once
    if constexpr (HostHalf<T> && std::is_same_v<B, CpuBackend>)
      mean = c.count > 0 ? static_cast<T>(l.template cast<float>().sum() / float(c.count)) : T(0);
    else mean = c.count > 0 ? l.sum() / static_cast<T>(c.count) : T(0);
    K::template normalise<T>(e, sums.local());
    c.probs = Logits(std::move(e), logits.rows(), logits.cols(), g);
    const Index count = c.count;
    return {Losses(std::move(l), t, 1, g), mean, count, std::move(c)};
  }

  /// dlosses[R] ([T, 1], the upstream gradient of each token's loss) → dlogits[C]. Local.
  [[nodiscard]] Logits backward(const Cache& c, const Losses& dlosses) const {
    if (dlosses.rows() != c.probs.rows() || dlosses.cols() != 1)
      throw ShapeError(shardalg::detail::cat(name_, ": loss gradient is ", dlosses.rows(), "x", dlosses.cols(),
                                             ", expected ", c.probs.rows(), "x1"));
    auto gt = dlosses.local();
    for (Index i = 0; i < gt.rows(); ++i)
      if (!c.active[static_cast<std::size_t>(i)]) gt(i, 0) = T(0);
    return grad(c, gt);
  }
  /// d(scale · mean)/dlogits[C]. Local.
  [[nodiscard]] Logits backward_mean(const Cache& c, T scale = T(1)) const {
    typename B::template matrix<T> gt = B::template zeros<T>(c.probs.rows(), 1);
    for (Index i = 0; i < gt.rows(); ++i)
      if (c.active[static_cast<std::size_t>(i)]) gt(i, 0) = scale / static_cast<T>(c.count);
    return grad(c, gt);
  }
  /// d(loss_scale · mean)/dlogits[C], scale / count formed in double and rounded once (a loss
  /// scale such as 2^16 is not an fp16 value; its quotient by the token count usually is). Local.
  [[nodiscard]] Logits backward_mean_scaled(const Cache& c, double loss_scale) const {
    typename B::template matrix<T> gt = B::template zeros<T>(c.probs.rows(), 1);
    for (Index i = 0; i < gt.rows(); ++i)
      if (c.active[static_cast<std::size_t>(i)]) gt(i, 0) = static_cast<T>(loss_scale / static_cast<double>(c.count));
    return grad(c, gt);
  }

 private:
  Logits grad(const Cache& c, const typename B::template matrix<T>& gt) const {
    auto d = CrossEntropyKernels<B>::template grad<T>(c.probs.local(), c.targets, gt, c.probs.col_offset(), vocab_,
                                                      static_cast<T>(smoothing_coefficient()));
    return Logits(std::move(d), c.probs.rows(), c.probs.cols(), c.probs.group());
  }

  void check(const Logits& logits, std::span<const std::int64_t> targets) const {
    if (static_cast<Index>(targets.size()) != logits.rows())
      throw ShapeError(shardalg::detail::cat(name_, ": ", targets.size(), " targets for ", logits.rows(), " logit rows"));
    if (logits.cols() < vocab_)
      throw ShapeError(shardalg::detail::cat(name_, ": logits have ", logits.cols(), " columns, fewer than vocabulary ",
                                             vocab_));
    for (const auto tg : targets)
      if (tg != opt_.ignore_index && (tg < 0 || tg >= vocab_))
        throw IndexError(shardalg::detail::cat(name_, ": target ", tg, " is out of range for vocabulary ", vocab_));
  }

  Index vocab_;
  CrossEntropyOptions opt_;
  std::string name_;
};

}  // namespace shardalg::nn
