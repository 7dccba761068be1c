// shardalg/reference/dense_layers.hpp — the dense twins of the layers, written independently in plain
// Eigen (double, column-major, whole matrices, loops over sequences and heads). No shardalg code
// is used here except the index-keyed random function that *defines* a dropout mask.
// Each backward is checked against central finite differences in tests/layers/test_layers.cpp.
// Used by the tests and by shardalg-verify; include it to check your own model against it.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <vector>

#include "shardalg/backend/random.hpp"

namespace ref {

using M = Eigen::MatrixXd;
using Index = Eigen::Index;

inline M add_row(M x, const M& b) {
  for (Index i = 0; i < x.rows(); ++i) x.row(i) += b.row(0);
  return x;
}
inline M colsum(const M& x) { return x.colwise().sum(); }

// ---- linear: Y = X·W + b -------------------------------------------------------------------
struct LinearGrads {
  M dx, dw, db;
};
inline M linear(const M& x, const M& w, const M& b) { return add_row(x * w, b); }
inline LinearGrads linear_backward(const M& x, const M& w, const M& dy) {
  return {dy * w.transpose(), x.transpose() * dy, colsum(dy)};
}

// ---- activations ------------------------------------------------------------------------------
constexpr double kPi = 3.14159265358979323846;
inline double gelu_tanh(double x) {
  const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
inline double gelu_tanh_d(double x) {
  const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  const double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech * sech * std::sqrt(2.0 / kPi) * (1.0 + 0.134145 * x * x);
}
inline double gelu_erf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
inline double gelu_erf_d(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
}
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x * sigmoid(x); }
inline double silu_d(double x) {
  const double s = sigmoid(x);
  return s + x * s * (1.0 - s);
}

// ---- MLP ------------------------------------------------------------------------------------------
enum class Act { gelu_tanh, gelu_erf, swiglu };
struct Mlp {
  M w1, b1, wu, bu, w2, b2;  // wu/bu: SwiGLU's up projection
  Act act;
};
struct MlpOut {
  M h1, hu, a, z;
};
struct MlpGrads {
  M dx, dw1, db1, dwu, dbu, dw2, db2;
};
inline MlpOut mlp_forward(const Mlp& m, const M& x) {
  MlpOut o;
  o.h1 = linear(x, m.w1, m.b1);
  o.a = M(o.h1.rows(), o.h1.cols());
  if (m.act == Act::swiglu) o.hu = linear(x, m.wu, m.bu);
  for (Index i = 0; i < o.a.rows(); ++i)
    for (Index j = 0; j < o.a.cols(); ++j) {
      const double h = o.h1(i, j);
      o.a(i, j) = m.act == Act::gelu_tanh ? gelu_tanh(h) : m.act == Act::gelu_erf ? gelu_erf(h) : silu(h) * o.hu(i, j);
    }
  o.z = linear(o.a, m.w2, m.b2);
  return o;
}
inline MlpGrads mlp_backward(const Mlp& m, const M& x, const MlpOut& o, const M& dz) {
  MlpGrads g;
  const auto g2 = linear_backward(o.a, m.w2, dz);
  g.dw2 = g2.dw;
  g.db2 = g2.db;
  M dh1(o.h1.rows(), o.h1.cols()), dhu;
  if (m.act == Act::swiglu) dhu = M(o.hu.rows(), o.hu.cols());
  for (Index i = 0; i < dh1.rows(); ++i)
    for (Index j = 0; j < dh1.cols(); ++j) {
      const double h = o.h1(i, j), da = g2.dx(i, j);
      if (m.act == Act::gelu_tanh) dh1(i, j) = da * gelu_tanh_d(h);
      else if (m.act == Act::gelu_erf) dh1(i, j) = da * gelu_erf_d(h);
      else {
        dh1(i, j) = da * o.hu(i, j) * silu_d(h);
        dhu(i, j) = da * silu(h);
      }
    }
  const auto g1 = linear_backward(x, m.w1, dh1);
  g.dx = g1.dx;
  g.dw1 = g1.dw;
  g.db1 = g1.db;
  if (m.act == Act::swiglu) {
    const auto gu = linear_backward(x, m.wu, dhu);
    g.dx += gu.dx;
    g.dwu = gu.dw;
    g.dbu = gu.db;
  }
  return g;
}

// ---- LayerNorm / RMSNorm over each row --------------------------------------------------------------
struct Norm {
  M gamma, beta;  // beta unused (zero) for RMSNorm
  bool center;
  double eps;
};
struct NormOut {
  M y, xhat;
  Eigen::VectorXd rstd;
};
struct NormGrads {
  M dx, dgamma, dbeta;
};
inline NormOut norm_forward(const Norm& n, const M& x) {
  NormOut o{M(x.rows(), x.cols()), M(x.rows(), x.cols()), Eigen::VectorXd(x.rows())};
  const double h = static_cast<double>(x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    double mu = 0;
    if (n.center)
      for (Index j = 0; j < x.cols(); ++j) mu += x(i, j) / h;
    double var = 0;
    for (Index j = 0; j < x.cols(); ++j) var += (x(i, j) - mu) * (x(i, j) - mu) / h;
    o.rstd(i) = 1.0 / std::sqrt(var + n.eps);
    for (Index j = 0; j < x.cols(); ++j) {
      o.xhat(i, j) = (x(i, j) - mu) * o.rstd(i);
      o.y(i, j) = o.xhat(i, j) * n.gamma(0, j) + (n.center ? n.beta(0, j) : 0.0);
    }
  }
  return o;
}
inline NormGrads norm_backward(const Norm& n, const NormOut& o, const M& dy) {
  NormGrads g{M(dy.rows(), dy.cols()), M::Zero(1, dy.cols()), M::Zero(1, dy.cols())};
  const double h = static_cast<double>(dy.cols());
  for (Index i = 0; i < dy.rows(); ++i) {
    double sg = 0, sgx = 0;
    for (Index j = 0; j < dy.cols(); ++j) {
      const double gj = dy(i, j) * n.gamma(0, j);
      sg += gj;
      sgx += gj * o.xhat(i, j);
      g.dgamma(0, j) += dy(i, j) * o.xhat(i, j);
      g.dbeta(0, j) += dy(i, j);
    }
    for (Index j = 0; j < dy.cols(); ++j) {
      const double gj = dy(i, j) * n.gamma(0, j);
      g.dx(i, j) = o.rstd(i) * (gj - (n.center ? sg / h : 0.0) - o.xhat(i, j) * sgx / h);
    }
  }
  return g;
}

// ---- causal self-attention with grouped K/V heads -----------------------------------------------------
// Attention dropout (p > 0): the probability of sequence b, head h, query i, key j is kept when
// uniform(seed, tensor, (b·heads + h)·seq + i, j) ≥ p and then scaled by 1/(1 − p); O = P̃·V with
// P̃ the dropped probabilities. `batch0` is the global index of the first sequence (a data-parallel
// replica's offset).
struct Attn {
  M wq, bq, wk, bk, wv, bv, wo, bo;
  Index heads, groups, seq;
  double p = 0;  // attention dropout
  std::uint64_t seed = 0, tensor = 0;
  Index batch0 = 0;
};
struct AttnOut {
  M q, k, v, o, z;
  std::vector<M> p;   // per (batch, head): softmax
  std::vector<M> pd;  // the same after attention dropout (= p when a.p is 0)
};
/// The attention-dropout factor of (sequence b, head h, query i, key j): 0 or 1/(1 − p).
inline double attn_drop_factor(const Attn& a, Index b, Index h, Index i, Index j) {
  const Index row = ((a.batch0 + b) * a.heads + h) * a.seq + i;
  return shardalg::nn::uniform_at(a.seed, a.tensor, row, j) < a.p ? 0.0 : 1.0 / (1.0 - a.p);
}
struct AttnGrads {
  M dx, dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo;
};
inline AttnOut attn_forward(const Attn& a, const M& x) {
  AttnOut r;
  r.q = linear(x, a.wq, a.bq);
  r.k = linear(x, a.wk, a.bk);
  r.v = linear(x, a.wv, a.bv);
  const Index d = a.wq.cols() / a.heads, nb = x.rows() / a.seq, s = a.seq;
  r.o = M::Zero(x.rows(), a.heads * d);
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < a.heads; ++h) {
      const Index g = h / (a.heads / a.groups);
      const M q = r.q.block(b * s, h * d, s, d), k = r.k.block(b * s, g * d, s, d), v = r.v.block(b * s, g * d, s, d);
      M p = M::Zero(s, s);
      for (Index i = 0; i < s; ++i) {
        double mx = -1e300;
        for (Index j = 0; j <= i; ++j) mx = std::max(mx, q.row(i).dot(k.row(j)) / std::sqrt(double(d)));
        double den = 0;
        for (Index j = 0; j <= i; ++j) den += (p(i, j) = std::exp(q.row(i).dot(k.row(j)) / std::sqrt(double(d)) - mx));
        for (Index j = 0; j <= i; ++j) p(i, j) /= den;
      }
      M pd = p;
      if (a.p > 0)
        for (Index i = 0; i < s; ++i)
          for (Index j = 0; j <= i; ++j) pd(i, j) *= attn_drop_factor(a, b, h, i, j);
      r.o.block(b * s, h * d, s, d) = pd * v;
      r.p.push_back(p);
      r.pd.push_back(pd);
    }
  r.z = linear(r.o, a.wo, a.bo);
  return r;
}
inline AttnGrads attn_backward(const Attn& a, const M& x, const AttnOut& r, const M& dz) {
  AttnGrads g;
  const auto go = linear_backward(r.o, a.wo, dz);
  g.dwo = go.dw;
  g.dbo = go.db;
  const Index d = a.wq.cols() / a.heads, nb = x.rows() / a.seq, s = a.seq;
  M dq = M::Zero(r.q.rows(), r.q.cols()), dk = M::Zero(r.k.rows(), r.k.cols()), dv = M::Zero(r.v.rows(), r.v.cols());
  std::size_t idx = 0;
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < a.heads; ++h, ++idx) {
      const Index g_ = h / (a.heads / a.groups);
      const M& p = r.p[idx];
      const M q = r.q.block(b * s, h * d, s, d), k = r.k.block(b * s, g_ * d, s, d), v = r.v.block(b * s, g_ * d, s, d);
      const M dO = go.dx.block(b * s, h * d, s, d);
      M dp = dO * v.transpose();  // d P̃, then (dropout) d P = d P̃ ⊙ factor
      if (a.p > 0)
        for (Index i = 0; i < s; ++i)
          for (Index j = 0; j < s; ++j) dp(i, j) *= j <= i ? attn_drop_factor(a, b, h, i, j) : 0.0;
      M ds(s, s);
      for (Index i = 0; i < s; ++i) {
        double dot = 0;
        for (Index j = 0; j < s; ++j) dot += dp(i, j) * p(i, j);
        for (Index j = 0; j < s; ++j) ds(i, j) = p(i, j) * (dp(i, j) - dot) / std::sqrt(double(d));
      }
      dv.block(b * s, g_ * d, s, d) += r.pd[idx].transpose() * dO;
      dq.block(b * s, h * d, s, d) += ds * k;
      dk.block(b * s, g_ * d, s, d) += ds.transpose() * q;
    }
  const auto gq = linear_backward(x, a.wq, dq), gk = linear_backward(x, a.wk, dk), gv = linear_backward(x, a.wv, dv);
  g.dx = gq.dx + gk.dx + gv.dx;
  g.dwq = gq.dw;
  g.dbq = gq.db;
  g.dwk = gk.dw;
  g.dbk = gk.db;
  g.dwv = gv.dw;
  g.dbv = gv.db;
  return g;
}

// ---- dropout: the mask is defined by the index-keyed uniform ----------------------------------------
inline M dropout(const M& x, double p, std::uint64_t seed, std::uint64_t tensor) {
  M y(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j)
      y(i, j) = p > 0 && shardalg::nn::uniform_at(seed, tensor, i, j) < p ? 0.0 : x(i, j) / (1.0 - p);
  return y;
}

// ---- pre-LN transformer block ----------------------------------------------------------------------------
struct Block {
  Norm ln1;
  Attn attn;
  Norm ln2;
  Mlp mlp;
  double p = 0;
  std::uint64_t seed = 0, drop_attn = 0, drop_mlp = 0;  // tensor ids of the two dropout sites
};
struct BlockOut {
  NormOut l1;
  AttnOut a;
  M y1;
  NormOut l2;
  MlpOut m;
  M y;
};
struct BlockGrads {
  M dx;
  NormGrads ln1, ln2;
  AttnGrads attn;
  MlpGrads mlp;
};
inline BlockOut block_forward(const Block& b, const M& x) {
  BlockOut o;
  o.l1 = norm_forward(b.ln1, x);
  o.a = attn_forward(b.attn, o.l1.y);
  o.y1 = x + dropout(o.a.z, b.p, b.seed, b.drop_attn);
  o.l2 = norm_forward(b.ln2, o.y1);
  o.m = mlp_forward(b.mlp, o.l2.y);
  o.y = o.y1 + dropout(o.m.z, b.p, b.seed, b.drop_mlp);
  return o;
}
inline BlockGrads block_backward(const Block& b, const M& x, const BlockOut& o, const M& dy) {
  BlockGrads g;
  g.mlp = mlp_backward(b.mlp, o.l2.y, o.m, dropout(dy, b.p, b.seed, b.drop_mlp));
  g.ln2 = norm_backward(b.ln2, o.l2, g.mlp.dx);
  const M dy1 = dy + g.ln2.dx;
  g.attn = attn_backward(b.attn, o.l1.y, o.a, dropout(dy1, b.p, b.seed, b.drop_attn));
  g.ln1 = norm_backward(b.ln1, o.l1, g.attn.dx);
  g.dx = dy1 + g.ln1.dx;
  (void)x;
  return g;
}

// ---- central finite differences ------------------------------------------------------------------------------
/// Normwise relative error between the analytic gradient of loss() with respect to `param`
/// (perturbed in place and restored) and central differences with step h.
/// With `absolute`, the plain max difference (for gradients that vanish identically, where a
/// relative error is noise over noise).
template <class F>
double fd_error(F&& loss, M& param, const M& analytic, double h = 1e-5, bool absolute = false) {
  double err = 0, scale = 0;
  for (Index i = 0; i < param.rows(); ++i)
    for (Index j = 0; j < param.cols(); ++j) {
      const double keep = param(i, j);
      param(i, j) = keep + h;
      const double lp = loss();
      param(i, j) = keep - h;
      const double lm = loss();
      param(i, j) = keep;
      const double num = (lp - lm) / (2 * h);
      err = std::max(err, std::abs(num - analytic(i, j)));
      scale = std::max(scale, std::abs(analytic(i, j)));
    }
  return absolute || scale == 0 ? err : err / scale;
}

// ---- GPT: embedding → blocks → final norm → tied head → cross-entropy ---------------------------
// The whole model on one "device", in double: E[vocab, h] looks tokens up and, transposed, is the LM
// head (tied); the loss is the mean token cross-entropy with PyTorch's label smoothing (the target
// distribution is (1 − ε)·onehot + ε/V: the target gets 1 − ε + ε/V, every other class ε/V) and
// ignore_index.
struct Gpt {
  M emb;  // [vocab, h]
  std::vector<Block> blocks;
  Norm final_norm;
  double p_emb = 0;  // dropout on the embedding output
  std::uint64_t seed = 0, drop_emb = 0;
};
struct GptOut {
  M x0;                         // embedding output after dropout
  std::vector<BlockOut> blocks;  // blocks[i].y is the input of block i + 1
  NormOut fn;
  M logits;                     // [T, vocab]
  Eigen::VectorXd loss;         // per token (0 where ignored)
  double mean = 0;
  int count = 0;
  M dlogits;                    // d mean / d logits
};
struct GptGrads {
  M demb;
  std::vector<BlockGrads> blocks;
  NormGrads fn;
};
inline GptOut gpt_forward(const Gpt& g, const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& targets,
                          double eps_smooth = 0.0, std::int64_t ignore = -100) {
  GptOut o;
  const Index t = static_cast<Index>(tokens.size()), h = g.emb.cols(), v = g.emb.rows();
  M x(t, h);
  for (Index i = 0; i < t; ++i) x.row(i) = g.emb.row(tokens[static_cast<std::size_t>(i)]);
  o.x0 = dropout(x, g.p_emb, g.seed, g.drop_emb);
  const M* in = &o.x0;
  for (const auto& b : g.blocks) {
    o.blocks.push_back(block_forward(b, *in));
    in = &o.blocks.back().y;
  }
  o.fn = norm_forward(g.final_norm, *in);
  o.logits = o.fn.y * g.emb.transpose();
  o.loss = Eigen::VectorXd::Zero(t);
  o.dlogits = M::Zero(t, v);
  for (Index i = 0; i < t; ++i) {
    const auto tg = targets[static_cast<std::size_t>(i)];
    if (tg == ignore) continue;
    ++o.count;
    double mx = o.logits(i, 0);
    for (Index j = 1; j < v; ++j) mx = std::max(mx, o.logits(i, j));
    double z = 0;
    for (Index j = 0; j < v; ++j) z += std::exp(o.logits(i, j) - mx);
    for (Index j = 0; j < v; ++j) {
      const double q = (j == tg ? 1.0 - eps_smooth : 0.0) + eps_smooth / double(v);
      const double logp = o.logits(i, j) - mx - std::log(z);
      o.loss(i) -= q * logp;
      o.dlogits(i, j) = std::exp(logp) - q;
    }
  }
  if (o.count > 0) {
    o.mean = o.loss.sum() / o.count;
    o.dlogits /= o.count;
  }
  return o;
}
inline GptGrads gpt_backward(const Gpt& g, const std::vector<std::int64_t>& tokens, const GptOut& o) {
  GptGrads r;
  r.demb = o.dlogits.transpose() * o.fn.y;  // the head's part
  r.fn = norm_backward(g.final_norm, o.fn, o.dlogits * g.emb);
  M dx = r.fn.dx;
  r.blocks.resize(g.blocks.size());
  for (std::size_t k = g.blocks.size(); k-- > 0;) {
    const M& in = k == 0 ? o.x0 : o.blocks[k - 1].y;
    r.blocks[k] = block_backward(g.blocks[k], in, o.blocks[k], dx);
    dx = r.blocks[k].dx;
  }
  dx = dropout(dx, g.p_emb, g.seed, g.drop_emb);
  for (std::size_t i = 0; i < tokens.size(); ++i) r.demb.row(tokens[i]) += dx.row(static_cast<Index>(i));  // lookup's part
  return r;
}

// ---- the physical layouts of the fused weights ------------------------------------------------
// How Megatron stores the fused QKV and SwiGLU fc1 on p ranks, built from the logical dense
// matrices here independently of the library's own column maps (nn::SwigluFc1Map, the attention
// layout), so that a sharded fused weight can be compared with its dense twin.

/// The blocks side by side.
inline M hcat(const std::vector<M>& blocks) {
  Index cols = 0;
  for (const auto& b : blocks) cols += b.cols();
  M out(blocks.at(0).rows(), cols);
  Index c = 0;
  for (const auto& b : blocks) {
    out.middleCols(c, b.cols()) = b;
    c += b.cols();
  }
  return out;
}


/// SwiGLU's fc1 as stored: rank r's block is [gate columns of r | up columns of r].
inline M swiglu_physical(const M& gate, const M& up, int p) {
  const Index w = gate.cols() / p;
  std::vector<M> blocks;
  for (int r = 0; r < p; ++r) {
    blocks.push_back(gate.middleCols(r * w, w));
    blocks.push_back(up.middleCols(r * w, w));
  }
  return hcat(blocks);
}

/// The fused QKV as stored (Megatron's per-group layout): rank r holds, per group it owns,
/// [its query heads | k | v]; with fewer groups than ranks, one group's k and v on every rank
/// that serves it.
inline M qkv_physical(const M& q, const M& k, const M& v, Index heads, Index groups, Index d, int p) {
  std::vector<M> blocks;
  for (int r = 0; r < p; ++r) {
    if (groups >= p) {
      const Index per = groups / p, qh = heads / groups;
      for (Index u = 0; u < per; ++u) {
        const Index g = r * per + u;
        blocks.push_back(q.middleCols(g * qh * d, qh * d));
        blocks.push_back(k.middleCols(g * d, d));
        blocks.push_back(v.middleCols(g * d, d));
      }
    } else {
      const Index qh = heads / p, g = r * groups / p;
      blocks.push_back(q.middleCols(r * qh * d, qh * d));
      blocks.push_back(k.middleCols(g * d, d));
      blocks.push_back(v.middleCols(g * d, d));
    }
  }
  return hcat(blocks);
}


}  // namespace ref
