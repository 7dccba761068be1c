// shardalg/reference/moe.hpp — the dense twin of the mixture-of-experts layer (nn/layers/moe.hpp), in plain
// Eigen on one "device", written independently of the sharded layer: it runs EVERY expert on EVERY
// token and combines the outputs with the routing, so no dispatch, no capacity bookkeeping by
// rank, no all-to-all. Checked against central finite differences in tests/moe.
//
//   p_t      = softmax(x_t · Wr)                                          [E] per token
//   e_t,s    = the k largest p_t,i (s = 0 the largest; ties: the lower expert index)
//   w_t,s    = p_t,e / Σ_s' p_t,e_s'      (renormalised; without renormalisation w_t,s = p_t,e)
//   kept     = dropless: every (t, s); capacity factor cf: per expert, the first
//              C = ⌈cf · k · T / E⌉ assignments in token order (T: every token of the batch),
//              C clamped to [1, T]; found as the least C ≥ 1 with C·E ≥ cf·k·T (moe_capacity)
//   y_t      = Σ_s kept(t, s) · w_t,s · MLP_e_t,s(x_t)
//   aux      = α · E · Σ_i f_i · P_i,   f_i = #{(t, s): e_t,s = i} / (k·T)  (before dropping),
//                                        P_i = Σ_t p_t,i / T            (Switch Transformer)
//
// Backward: dMLP_e rows are kept · w_t,s · dy_t; dw_t,s = ⟨dy_t, MLP_e(x_t)⟩; through the
// renormalisation and the softmax to the router logits; f_i is a count (no gradient), P_i gives
// ∂aux/∂p_t,i = α · E · f_i / T.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "shardalg/reference/dense_layers.hpp"

namespace ref {

struct Moe {
  M router;                  // Wr [h, E]
  std::vector<Mlp> experts;  // E MLPs on h
  Index k = 1;
  bool renormalize = true;
  std::optional<double> capacity_factor;  // unset: dropless
  double aux_coeff = 0;        // α
};

struct MoeOut {
  M logits, probs;                       // [T, E]
  std::vector<std::vector<Index>> pick;  // [T][k]: chosen experts, most probable first
  M w;                                   // [T, k]: combine weights
  std::vector<std::vector<bool>> kept;   // [T][k]
  std::vector<MlpOut> run;               // every expert on every token
  std::vector<Index> count;              // per expert: assignments before dropping
  std::vector<Index> processed;          // per expert: assignments kept
  double aux = 0;
  M y;                                   // [T, h]
};

struct MoeGrads {
  M dx, drouter;
  std::vector<MlpGrads> experts;
};

/// The capacity of each expert for T tokens (nullopt: dropless): the least C in [1, T] with
/// C·E ≥ cf·k·T, by bisection (T when none is: an expert takes at most one assignment per token).
/// No floating value becomes an integer on the way; 0 for T = 0.
inline std::optional<Index> moe_capacity(const Moe& m, Index tokens) {
  if (!m.capacity_factor) return std::nullopt;
  if (tokens == 0) return Index{0};
  const double need = *m.capacity_factor * (static_cast<double>(m.k) * static_cast<double>(tokens));
  const double e = static_cast<double>(m.experts.size());
  Index lo = 1, hi = tokens;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const Index mid = lo + (hi - lo) / 2;
    if (static_cast<double>(mid) * e >= need) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

inline MoeOut moe_forward(const Moe& m, const M& x) {
  MoeOut o;
  const Index t = x.rows(), e = static_cast<Index>(m.experts.size());
  o.logits = x * m.router;
  o.probs = M(t, e);
  for (Index i = 0; i < t; ++i) {
    const double mx = o.logits.row(i).maxCoeff();
    double z = 0;
    for (Index j = 0; j < e; ++j) z += std::exp(o.logits(i, j) - mx);
    for (Index j = 0; j < e; ++j) o.probs(i, j) = std::exp(o.logits(i, j) - mx) / z;
  }
  o.pick.assign(static_cast<std::size_t>(t), {});
  o.w = M(t, m.k);
  o.count.assign(static_cast<std::size_t>(e), 0);
  for (Index i = 0; i < t; ++i) {
    std::vector<Index> order(static_cast<std::size_t>(e));
    for (Index j = 0; j < e; ++j) order[static_cast<std::size_t>(j)] = j;
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return o.probs(i, a) > o.probs(i, b); });
    order.resize(static_cast<std::size_t>(m.k));
    double s = 0;
    for (Index j : order) s += o.probs(i, j);
    for (Index q = 0; q < m.k; ++q) {
      const Index j = order[static_cast<std::size_t>(q)];
      o.w(i, q) = m.renormalize ? o.probs(i, j) / s : o.probs(i, j);
      ++o.count[static_cast<std::size_t>(j)];
    }
    o.pick[static_cast<std::size_t>(i)] = order;
  }
  // Capacity: walk the tokens in order; an expert takes assignments until it holds C.
  const std::optional<Index> cap = moe_capacity(m, t);  // nullopt: dropless
  o.processed.assign(static_cast<std::size_t>(e), 0);
  o.kept.assign(static_cast<std::size_t>(t), std::vector<bool>(static_cast<std::size_t>(m.k), true));
  for (Index i = 0; i < t; ++i)
    for (Index q = 0; q < m.k; ++q) {
      auto& n = o.processed[static_cast<std::size_t>(o.pick[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)])];
      if (cap && n >= *cap) o.kept[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)] = false;
      else ++n;
    }
  for (const auto& ex : m.experts) o.run.push_back(mlp_forward(ex, x));
  o.y = M::Zero(t, x.cols());
  for (Index i = 0; i < t; ++i)
    for (Index q = 0; q < m.k; ++q)
      if (o.kept[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)]) {
        const Index j = o.pick[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)];
        o.y.row(i) += o.w(i, q) * o.run[static_cast<std::size_t>(j)].z.row(i);
      }
  double aux = 0;
  for (Index j = 0; j < e; ++j) {
    const double f = static_cast<double>(o.count[static_cast<std::size_t>(j)]) / static_cast<double>(m.k * t);
    aux += f * o.probs.col(j).sum() / static_cast<double>(t);
  }
  o.aux = m.aux_coeff * static_cast<double>(e) * aux;
  return o;
}

/// dy: the cotangent of y; daux: of the aux loss (1 when it is added to the loss as it is).
inline MoeGrads moe_backward(const Moe& m, const M& x, const MoeOut& o, const M& dy, double daux) {
  MoeGrads g;
  const Index t = x.rows(), e = static_cast<Index>(m.experts.size());
  // Each expert's output cotangent: kept · w · dy on the rows routed to it, zero elsewhere.
  std::vector<M> dz(static_cast<std::size_t>(e), M::Zero(t, x.cols()));
  M dw = M::Zero(t, m.k);
  for (Index i = 0; i < t; ++i)
    for (Index q = 0; q < m.k; ++q) {
      if (!o.kept[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)]) continue;
      const Index j = o.pick[static_cast<std::size_t>(i)][static_cast<std::size_t>(q)];
      dz[static_cast<std::size_t>(j)].row(i) += o.w(i, q) * dy.row(i);
      dw(i, q) = dy.row(i).dot(o.run[static_cast<std::size_t>(j)].z.row(i));
    }
  g.dx = M::Zero(t, x.cols());
  for (Index j = 0; j < e; ++j) {
    const auto& ex = m.experts[static_cast<std::size_t>(j)];
    g.experts.push_back(mlp_backward(ex, x, o.run[static_cast<std::size_t>(j)], dz[static_cast<std::size_t>(j)]));
    g.dx += g.experts.back().dx;
  }
  // d probs: through the combine weights, and the aux loss's P_i.
  M dp = M::Zero(t, e);
  for (Index i = 0; i < t; ++i) {
    const auto& pk = o.pick[static_cast<std::size_t>(i)];
    double s = 0, sw = 0;
    for (Index q = 0; q < m.k; ++q) s += o.probs(i, pk[static_cast<std::size_t>(q)]);
    for (Index q = 0; q < m.k; ++q) sw += dw(i, q) * o.w(i, q);
    for (Index q = 0; q < m.k; ++q) {
      const Index j = pk[static_cast<std::size_t>(q)];
      dp(i, j) += m.renormalize ? (dw(i, q) - sw) / s : dw(i, q);  // w = p/s: ∂/∂p_j (dw·w) = (dw_j − Σ dw·w)/s
    }
    for (Index j = 0; j < e; ++j) {
      const double f = static_cast<double>(o.count[static_cast<std::size_t>(j)]) / static_cast<double>(m.k * t);
      dp(i, j) += daux * m.aux_coeff * static_cast<double>(e) * f / static_cast<double>(t);
    }
  }
  // Softmax: dl_j = p_j (dp_j − Σ_i p_i dp_i).
  M dl(t, e);
  for (Index i = 0; i < t; ++i) {
    const double dot = o.probs.row(i).dot(dp.row(i));
    for (Index j = 0; j < e; ++j) dl(i, j) = o.probs(i, j) * (dp(i, j) - dot);
  }
  g.dx += dl * m.router.transpose();
  g.drouter = x.transpose() * dl;
  return g;
}

}  // namespace ref
