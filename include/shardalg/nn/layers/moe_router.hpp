// shardalg/nn/layers/moe_router.hpp — the top-k router of a mixture of experts (nn/layers/moe.hpp), on this
// rank's tokens, and the Switch Transformer load-balancing loss with its gradient.
//
//   logits = X[ep:Row, etp:R] · Wr[ep:R, etp:R] → L[ep:Row, etp:R]     [T, E], local (Row·R, R·R)
//   p_t    = softmax(L_t)                                                per token, local
//   top-k  e_t,s = the k largest p_t,i, s = 0 the largest (ties: the lower expert index)
//   w_t,s  = p_t,e_t,s / Σ_s' p_t,e_t,s'      renormalised (Megatron's default; `renormalize = false`:
//                                              w_t,s = p_t,e_t,s, Switch's k = 1 form)
//   aux    = α · E · Σ_i f_i · P_i   f_i = c_i / (k·T), c_i the assignments to expert i (before any
//            capacity drop), P_i = Σ_t p_t,i / T; T, c_i and Σ_t p_t,i over the whole batch (every ep
//            rank's tokens: nn/layers/moe.hpp gathers them), so the loss does not depend on EP.
//
// Backward (local): dw from the combine; dp_t,e = (dw_t,s − Σ_s' dw_t,s'·w_t,s') / Σ_s' p_t,e_s'
// (renormalised) or dw_t,s; the aux loss adds ∂aux/∂p_t,i = α·E·f_i/T to every token; the softmax
// gives dL_t,j = p_t,j (dp_t,j − Σ_i p_t,i dp_t,i). Then (nn/layers/moe.hpp) dX += dL · Wrᵀ and
// dWr = Xᵀ[ep:C] · dL[ep:Row] → dWr[ep:Partial]: a summand per ep rank, all_reduce<ep> before the
// update (E130 otherwise).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg::nn {

struct RouterConfig {
  Index experts = 0;  // E
  Index top_k = 1;    // k, 1 ≤ k ≤ E
  bool renormalize = true;
  double aux_loss_coeff = 0.0;  // α (0: no load-balancing loss)
};

/// The routing of this rank's tokens (host matrices: the router runs on the CPU backend).
template <class T>
struct Routing {
  using Mat = CpuBackend::matrix<T>;
  Index k = 1;
  Mat probs;                  // [T_local, E]: softmax of the logits
  Mat weights;                // [T_local, k]: combine weights, slot order
  std::vector<Index> expert;  // [T_local·k]: expert of (token t, slot s) at t·k + s
  std::vector<Index> counts;  // [E]: this rank's assignments per expert
  [[nodiscard]] Index tokens() const { return probs.rows(); }
  [[nodiscard]] Index of(Index t, Index s) const { return expert[static_cast<std::size_t>(t * k + s)]; }
};

template <class T>
class TopKRouter {
 public:
  using Mat = CpuBackend::matrix<T>;

  /// ShapeError naming the values: k outside [1, E].
  static void check(const RouterConfig& c) {
    using detail::cat;
    if (c.experts < 1) throw ShapeError(cat("MoE router: ", c.experts, " experts; a mixture needs at least 1"));
    if (c.top_k < 1) throw ShapeError(cat("MoE router: top-k ", c.top_k, " must be at least 1"));
    if (c.top_k > c.experts)
      throw ShapeError(cat("MoE router: top-k ", c.top_k, " is larger than the number of experts ", c.experts));
    if (!(std::isfinite(c.aux_loss_coeff) && c.aux_loss_coeff >= 0))
      throw ShapeError(cat("MoE router: aux loss coefficient ", c.aux_loss_coeff, " must be finite and not negative"));
  }

  explicit TopKRouter(const RouterConfig& c) : cfg_(c) { check(c); }
  [[nodiscard]] const RouterConfig& config() const { return cfg_; }

  /// Softmax, top-k (stable: ties to the lower expert index), combine weights, per-expert counts.
  [[nodiscard]] Routing<T> route(const Mat& logits) const {
    const Index t = logits.rows(), e = cfg_.experts, k = cfg_.top_k;
    Routing<T> r{k, Mat(t, e), Mat(t, k), std::vector<Index>(static_cast<std::size_t>(t * k)),
                 std::vector<Index>(static_cast<std::size_t>(e), 0)};
    std::vector<Index> order(static_cast<std::size_t>(e));
    for (Index i = 0; i < t; ++i) {
      const T mx = logits.row(i).maxCoeff();
      T z = 0;
      for (Index j = 0; j < e; ++j) z += (r.probs(i, j) = std::exp(logits(i, j) - mx));
      r.probs.row(i) /= z;
      std::iota(order.begin(), order.end(), Index{0});
      std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return r.probs(i, a) > r.probs(i, b); });
      T s = 0;
      for (Index q = 0; q < k; ++q) s += r.probs(i, order[static_cast<std::size_t>(q)]);
      for (Index q = 0; q < k; ++q) {
        const Index j = order[static_cast<std::size_t>(q)];
        r.expert[static_cast<std::size_t>(i * k + q)] = j;
        r.weights(i, q) = cfg_.renormalize ? r.probs(i, j) / s : r.probs(i, j);
        ++r.counts[static_cast<std::size_t>(j)];
      }
    }
    return r;
  }

  /// Σ_t p_t,i over this rank's tokens: [E] (a summand of the batch's).
  [[nodiscard]] std::vector<T> prob_sums(const Routing<T>& r) const {
    std::vector<T> s(static_cast<std::size_t>(cfg_.experts), T(0));
    for (Index i = 0; i < r.tokens(); ++i)
      for (Index j = 0; j < cfg_.experts; ++j) s[static_cast<std::size_t>(j)] += r.probs(i, j);
    return s;
  }

  /// α·E·Σ_i f_i·P_i from the batch's counts c_i and probability sums, over `tokens` tokens.
  [[nodiscard]] T aux_loss(const std::vector<Index>& counts, const std::vector<T>& prob_sums, Index tokens) const {
    if (cfg_.aux_loss_coeff == 0.0 || tokens == 0) return T(0);
    T acc = 0;
    for (Index j = 0; j < cfg_.experts; ++j)
      acc += f(counts, j, tokens) * prob_sums[static_cast<std::size_t>(j)] / static_cast<T>(tokens);
    return static_cast<T>(cfg_.aux_loss_coeff) * static_cast<T>(cfg_.experts) * acc;
  }

  /// dL [T_local, E] from the combine weights' cotangent dw [T_local, k] and the aux loss's
  /// cotangent daux (the batch's counts c_i and token count fix ∂aux/∂p_t,i = α·E·f_i/T).
  [[nodiscard]] Mat backward(const Routing<T>& r, const Mat& dw, T daux, const std::vector<Index>& counts,
                             Index tokens) const {
    const Index t = r.tokens(), e = cfg_.experts, k = r.k;
    Mat dp = Mat::Zero(t, e);
    std::vector<T> daux_dp(static_cast<std::size_t>(e), T(0));
    if (cfg_.aux_loss_coeff != 0.0 && tokens > 0)
      for (Index j = 0; j < e; ++j)
        daux_dp[static_cast<std::size_t>(j)] =
            daux * static_cast<T>(cfg_.aux_loss_coeff) * static_cast<T>(e) * f(counts, j, tokens) / static_cast<T>(tokens);
    for (Index i = 0; i < t; ++i) {
      T s = 0, sw = 0;
      for (Index q = 0; q < k; ++q) {
        s += r.probs(i, r.of(i, q));
        sw += dw(i, q) * r.weights(i, q);
      }
      for (Index q = 0; q < k; ++q) dp(i, r.of(i, q)) += cfg_.renormalize ? (dw(i, q) - sw) / s : dw(i, q);
      for (Index j = 0; j < e; ++j) dp(i, j) += daux_dp[static_cast<std::size_t>(j)];
    }
    Mat dl(t, e);
    for (Index i = 0; i < t; ++i) {
      const T dot = r.probs.row(i).dot(dp.row(i));
      for (Index j = 0; j < e; ++j) dl(i, j) = r.probs(i, j) * (dp(i, j) - dot);
    }
    return dl;
  }

 private:
  /// f_i = c_i / (k·T).
  [[nodiscard]] T f(const std::vector<Index>& counts, Index j, Index tokens) const {
    return static_cast<T>(counts[static_cast<std::size_t>(j)]) / static_cast<T>(cfg_.top_k * tokens);
  }

  RouterConfig cfg_;
};

}  // namespace shardalg::nn
