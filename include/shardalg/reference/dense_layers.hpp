// shardalg/reference/dense_layers.hpp — the dense twins of the layers, written independently in plain
// Eigen (column-major, whole matrices, loops over sequences and heads). No shardalg code is used
// here except the index-keyed random function that *defines* a dropout mask.
// Each backward is checked against central finite differences in tests/layers/test_layers.cpp.
// Used by the tests and by shardalg-verify; include it to check your own model against it.
//
// Every layer is written once, generic in its scalar S: double (the names without `Of`: Mlp,
// Norm, Gpt, … are S = double), or precision::Running<F> (precision/running.hpp), which carries
// beside each value a bound on the rounding error of a program that computes it in format F — so
// the same code gives the dense result and, for every tensor forward and backward, its derived
// error bound. Parameters that are not tensors (eps, dropout p, the seeds) stay double.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "shardalg/backend/random.hpp"

namespace ref {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
using M = Mat<double>;
using Index = Eigen::Index;
/// S where it must not be deduced (an argument given as an Eigen expression converts).
template <class S>
using Same = std::type_identity_t<S>;

// ---- where a program that stores narrower than it computes rounds ------------------------------
// `stored(m)`: a tensor the program materialises (every output of a kernel); `reduced(m)`: a
// contraction that tensor parallelism splits across ranks, all-reduced. Both are the identity for
// double and float. precision::Running supplies storage_round and partial_round (found by ADL):
// under a precision::StorageScope they add the rounding to bf16 or fp16 storage and the 16-bit
// all-reduce's. The twin rounds wherever a layer's kernels may store — more often than a fused
// kernel does, which only loosens the bound.
template <class S>
S storage_round(const S& x) {
  return x;
}
template <class S>
S partial_round(const S& x) {
  return x;
}
template <class S>
Mat<S> stored(Mat<S> m) {
  if constexpr (!std::is_arithmetic_v<S>)
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = storage_round(m.data()[i]);
  return m;
}
template <class S>
Mat<S> reduced(Mat<S> m) {
  if constexpr (!std::is_arithmetic_v<S>)
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = partial_round(m.data()[i]);
  return m;
}

template <class S>
Mat<S> add_row(Mat<S> x, const Mat<Same<S>>& b) {
  for (Index i = 0; i < x.rows(); ++i) x.row(i) += b.row(0);
  return x;
}
template <class S>
Mat<S> colsum(const Mat<S>& x) {
  return x.colwise().sum();
}

// ---- linear: Y = X·W + b -------------------------------------------------------------------
/// How tensor parallelism splits a linear layer (Megatron): `column` splits W's columns, so the
/// backward's dX = dY·Wᵀ is all-reduced; `row` splits its rows, so Y = X·W is all-reduced (and,
/// under SP, db). Only the roundings of a narrower storage format depend on it.
enum class Split { none, column, row };
template <class S>
struct LinearGradsOf {
  Mat<S> dx, dw, db;
};
using LinearGrads = LinearGradsOf<double>;
template <class S>
Mat<S> linear(const Mat<S>& x, const Mat<Same<S>>& w, const Mat<Same<S>>& b, Split split = Split::none) {
  Mat<S> xw = x * w;
  if (split == Split::row) xw = reduced<S>(std::move(xw));
  return stored<S>(add_row<S>(stored<S>(std::move(xw)), b));
}
template <class S>
LinearGradsOf<S> linear_backward(const Mat<S>& x, const Mat<Same<S>>& w, const Mat<Same<S>>& dy, Split split = Split::none) {
  Mat<S> dx = dy * w.transpose(), db = colsum<S>(dy);
  if (split == Split::column) dx = reduced<S>(std::move(dx));
  if (split == Split::row) db = reduced<S>(std::move(db));
  return {stored<S>(std::move(dx)), stored<S>(x.transpose() * dy), stored<S>(std::move(db))};
}

// ---- activations ------------------------------------------------------------------------------
constexpr double kPi = 3.14159265358979323846;
template <class S>
S gelu_tanh(const S& x) {
  using std::sqrt, std::tanh;
  const S u = S(std::sqrt(2.0 / kPi)) * (x + S(0.044715) * x * x * x);
  return S(0.5) * x * (S(1.0) + tanh(u));
}
template <class S>
S gelu_tanh_d(const S& x) {
  using std::cosh, std::tanh;
  const S c = S(std::sqrt(2.0 / kPi));
  const S u = c * (x + S(0.044715) * x * x * x);
  const S sech = S(1.0) / cosh(u);
  return S(0.5) * (S(1.0) + tanh(u)) + S(0.5) * x * sech * sech * c * (S(1.0) + S(0.134145) * x * x);
}
template <class S>
S gelu_erf(const S& x) {
  using std::erfc;
  return S(0.5) * x * erfc(-x / S(std::sqrt(2.0)));
}
template <class S>
S gelu_erf_d(const S& x) {
  using std::erfc, std::exp;
  return S(0.5) * erfc(-x / S(std::sqrt(2.0))) + x * exp(S(-0.5) * x * x) / S(std::sqrt(2.0 * kPi));
}
template <class S>
S sigmoid(const S& x) {
  using std::exp;
  return S(1.0) / (S(1.0) + exp(-x));
}
template <class S>
S silu(const S& x) {
  return x * sigmoid(x);
}
template <class S>
S silu_d(const S& x) {
  const S s = sigmoid(x);
  return s + x * s * (S(1.0) - s);
}

// ---- MLP ------------------------------------------------------------------------------------------
enum class Act { gelu_tanh, gelu_erf, swiglu };
template <class S>
struct MlpOf {
  Mat<S> w1, b1, wu, bu, w2, b2;  // wu/bu: SwiGLU's up projection
  Act act;
};
template <class S>
struct MlpOutOf {
  Mat<S> h1, hu, a, z;
};
template <class S>
struct MlpGradsOf {
  Mat<S> dx, dw1, db1, dwu, dbu, dw2, db2;
};
using Mlp = MlpOf<double>;
using MlpOut = MlpOutOf<double>;
using MlpGrads = MlpGradsOf<double>;
template <class S>
MlpOutOf<S> mlp_forward(const MlpOf<S>& m, const Mat<Same<S>>& x) {
  MlpOutOf<S> o;
  o.h1 = linear<S>(x, m.w1, m.b1);
  o.a = Mat<S>(o.h1.rows(), o.h1.cols());
  if (m.act == Act::swiglu) o.hu = linear<S>(x, m.wu, m.bu);
  for (Index i = 0; i < o.a.rows(); ++i)
    for (Index j = 0; j < o.a.cols(); ++j) {
      const S h = o.h1(i, j);
      o.a(i, j) = m.act == Act::gelu_tanh ? gelu_tanh(h) : m.act == Act::gelu_erf ? gelu_erf(h) : silu(h) * o.hu(i, j);
    }
  o.a = stored<S>(std::move(o.a));
  o.z = linear<S>(o.a, m.w2, m.b2, Split::row);
  return o;
}
template <class S>
MlpGradsOf<S> mlp_backward(const MlpOf<S>& m, const Mat<Same<S>>& x, const MlpOutOf<S>& o, const Mat<Same<S>>& dz) {
  MlpGradsOf<S> g;
  const auto g2 = linear_backward<S>(o.a, m.w2, dz, Split::row);
  g.dw2 = g2.dw;
  g.db2 = g2.db;
  Mat<S> dh1(o.h1.rows(), o.h1.cols()), dhu;
  if (m.act == Act::swiglu) dhu = Mat<S>(o.hu.rows(), o.hu.cols());
  for (Index i = 0; i < dh1.rows(); ++i)
    for (Index j = 0; j < dh1.cols(); ++j) {
      const S h = o.h1(i, j), da = g2.dx(i, j);
      if (m.act == Act::gelu_tanh) dh1(i, j) = da * gelu_tanh_d(h);
      else if (m.act == Act::gelu_erf) dh1(i, j) = da * gelu_erf_d(h);
      else {
        dh1(i, j) = da * o.hu(i, j) * silu_d(h);
        dhu(i, j) = da * silu(h);
      }
    }
  dh1 = stored<S>(std::move(dh1));
  if (m.act == Act::swiglu) dhu = stored<S>(std::move(dhu));
  const auto g1 = linear_backward<S>(x, m.w1, dh1, Split::column);
  g.dx = g1.dx;
  g.dw1 = g1.dw;
  g.db1 = g1.db;
  if (m.act == Act::swiglu) {
    const auto gu = linear_backward<S>(x, m.wu, dhu, Split::column);
    g.dx += gu.dx;
    g.dwu = gu.dw;
    g.dbu = gu.db;
  }
  return g;
}

// ---- LayerNorm / RMSNorm over each row --------------------------------------------------------------
template <class S>
struct NormOf {
  Mat<S> gamma, beta;  // beta unused (zero) for RMSNorm
  bool center;
  double eps;
};
template <class S>
struct NormOutOf {
  Mat<S> y, xhat;
  Vec<S> rstd;
};
template <class S>
struct NormGradsOf {
  Mat<S> dx, dgamma, dbeta;
};
using Norm = NormOf<double>;
using NormOut = NormOutOf<double>;
using NormGrads = NormGradsOf<double>;
template <class S>
NormOutOf<S> norm_forward(const NormOf<S>& n, const Mat<Same<S>>& x) {
  using std::sqrt;
  NormOutOf<S> o{Mat<S>(x.rows(), x.cols()), Mat<S>(x.rows(), x.cols()), Vec<S>(x.rows())};
  const S h = S(static_cast<double>(x.cols()));
  for (Index i = 0; i < x.rows(); ++i) {
    S mu = S(0.0);
    if (n.center)
      for (Index j = 0; j < x.cols(); ++j) mu += x(i, j) / h;
    S var = S(0.0);
    for (Index j = 0; j < x.cols(); ++j) var += (x(i, j) - mu) * (x(i, j) - mu) / h;
    o.rstd(i) = S(1.0) / sqrt(var + S(n.eps));
    for (Index j = 0; j < x.cols(); ++j) {
      o.xhat(i, j) = (x(i, j) - mu) * o.rstd(i);
      o.y(i, j) = n.center ? o.xhat(i, j) * n.gamma(0, j) + n.beta(0, j) : o.xhat(i, j) * n.gamma(0, j);
    }
  }
  o.y = stored<S>(std::move(o.y));
  o.xhat = stored<S>(std::move(o.xhat));
  o.rstd = stored<S>(Mat<S>(o.rstd));
  return o;
}
template <class S>
NormGradsOf<S> norm_backward(const NormOf<S>& n, const NormOutOf<S>& o, const Mat<Same<S>>& dy) {
  NormGradsOf<S> g{Mat<S>(dy.rows(), dy.cols()), Mat<S>::Zero(1, dy.cols()), Mat<S>::Zero(1, dy.cols())};
  const S h = S(static_cast<double>(dy.cols()));
  for (Index i = 0; i < dy.rows(); ++i) {
    S sg = S(0.0), sgx = S(0.0);
    for (Index j = 0; j < dy.cols(); ++j) {
      const S gj = dy(i, j) * n.gamma(0, j);
      sg += gj;
      sgx += gj * o.xhat(i, j);
      g.dgamma(0, j) += dy(i, j) * o.xhat(i, j);
      g.dbeta(0, j) += dy(i, j);
    }
    for (Index j = 0; j < dy.cols(); ++j) {
      const S gj = dy(i, j) * n.gamma(0, j);
      g.dx(i, j) = n.center ? o.rstd(i) * (gj - sg / h - o.xhat(i, j) * sgx / h) : o.rstd(i) * (gj - o.xhat(i, j) * sgx / h);
    }
  }
  // dγ, dβ: sums over the tokens, split between ranks under sequence parallelism
  return {stored<S>(std::move(g.dx)), stored<S>(reduced<S>(std::move(g.dgamma))), stored<S>(reduced<S>(std::move(g.dbeta)))};
}

// ---- causal self-attention with grouped K/V heads -----------------------------------------------------
// Attention dropout (p > 0): the probability of sequence b, head h, query i, key j is kept when
// uniform(seed, tensor, (b·heads + h)·seq + i, j) ≥ p and then scaled by 1/(1 − p); O = P̃·V with
// P̃ the dropped probabilities. `batch0` is the global index of the first sequence (a data-parallel
// replica's offset).
template <class S>
struct AttnOf {
  Mat<S> wq, bq, wk, bk, wv, bv, wo, bo;
  Index heads, groups, seq;
  double p = 0;  // attention dropout
  std::uint64_t seed = 0, tensor = 0;
  Index batch0 = 0;
};
template <class S>
struct AttnOutOf {
  Mat<S> q, k, v, o, z;
  std::vector<Mat<S>> p;   // per (batch, head): softmax
  std::vector<Mat<S>> pd;  // the same after attention dropout (= p when a.p is 0)
};
template <class S>
struct AttnGradsOf {
  Mat<S> dx, dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo;
};
using Attn = AttnOf<double>;
using AttnOut = AttnOutOf<double>;
using AttnGrads = AttnGradsOf<double>;
/// The attention-dropout factor of (sequence b, head h, query i, key j): 0 or 1/(1 − p).
template <class S>
double attn_drop_factor(const AttnOf<S>& a, Index b, Index h, Index i, Index j) {
  const Index row = ((a.batch0 + b) * a.heads + h) * a.seq + i;
  return shardalg::nn::dropout_uniform(a.seed, a.tensor, row, j) < a.p ? 0.0 : 1.0 / (1.0 - a.p);
}
template <class S>
AttnOutOf<S> attn_forward(const AttnOf<S>& a, const Mat<Same<S>>& x) {
  using std::exp, std::max;
  AttnOutOf<S> r;
  r.q = linear<S>(x, a.wq, a.bq);
  r.k = linear<S>(x, a.wk, a.bk);
  r.v = linear<S>(x, a.wv, a.bv);
  const Index d = a.wq.cols() / a.heads, nb = x.rows() / a.seq, s = a.seq;
  const S sd = S(std::sqrt(double(d)));
  r.o = Mat<S>::Zero(x.rows(), a.heads * d);
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < a.heads; ++h) {
      const Index g = h / (a.heads / a.groups);
      const Mat<S> q = r.q.block(b * s, h * d, s, d), k = r.k.block(b * s, g * d, s, d), v = r.v.block(b * s, g * d, s, d);
      Mat<S> p = Mat<S>::Zero(s, s);
      for (Index i = 0; i < s; ++i) {
        S mx = q.row(i).dot(k.row(0)) / sd;
        for (Index j = 1; j <= i; ++j) mx = max(mx, S(q.row(i).dot(k.row(j)) / sd));
        S den = S(0.0);
        for (Index j = 0; j <= i; ++j) den += (p(i, j) = exp(S(q.row(i).dot(k.row(j)) / sd - mx)));
        for (Index j = 0; j <= i; ++j) p(i, j) /= den;
      }
      Mat<S> pd = p;
      if (a.p > 0)
        for (Index i = 0; i < s; ++i)
          for (Index j = 0; j <= i; ++j) pd(i, j) *= S(attn_drop_factor(a, b, h, i, j));
      r.o.block(b * s, h * d, s, d) = pd * v;
      r.p.push_back(stored<S>(std::move(p)));  // what the backward reads
      r.pd.push_back(stored<S>(std::move(pd)));
    }
  r.o = stored<S>(std::move(r.o));
  r.z = linear<S>(r.o, a.wo, a.bo, Split::row);
  return r;
}
template <class S>
AttnGradsOf<S> attn_backward(const AttnOf<S>& a, const Mat<Same<S>>& x, const AttnOutOf<S>& r, const Mat<Same<S>>& dz) {
  AttnGradsOf<S> g;
  const auto go = linear_backward<S>(r.o, a.wo, dz, Split::row);
  g.dwo = go.dw;
  g.dbo = go.db;
  const Index d = a.wq.cols() / a.heads, nb = x.rows() / a.seq, s = a.seq;
  const S sd = S(std::sqrt(double(d)));
  Mat<S> dq = Mat<S>::Zero(r.q.rows(), r.q.cols()), dk = Mat<S>::Zero(r.k.rows(), r.k.cols()),
         dv = Mat<S>::Zero(r.v.rows(), r.v.cols());
  std::size_t idx = 0;
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < a.heads; ++h, ++idx) {
      const Index g_ = h / (a.heads / a.groups);
      const Mat<S>& p = r.p[idx];
      const Mat<S> q = r.q.block(b * s, h * d, s, d), k = r.k.block(b * s, g_ * d, s, d), v = r.v.block(b * s, g_ * d, s, d);
      const Mat<S> dO = go.dx.block(b * s, h * d, s, d);
      Mat<S> dp = dO * v.transpose();  // d P̃, then (dropout) d P = d P̃ ⊙ factor
      if (a.p > 0)
        for (Index i = 0; i < s; ++i)
          for (Index j = 0; j < s; ++j) dp(i, j) *= S(j <= i ? attn_drop_factor(a, b, h, i, j) : 0.0);
      Mat<S> ds(s, s);
      for (Index i = 0; i < s; ++i) {
        S dot = S(0.0);
        for (Index j = 0; j < s; ++j) dot += dp(i, j) * p(i, j);
        for (Index j = 0; j < s; ++j) ds(i, j) = p(i, j) * (dp(i, j) - dot) / sd;
      }
      dv.block(b * s, g_ * d, s, d) += r.pd[idx].transpose() * dO;
      dq.block(b * s, h * d, s, d) += ds * k;
      dk.block(b * s, g_ * d, s, d) += ds.transpose() * q;
    }
  dq = stored<S>(std::move(dq));
  dk = stored<S>(std::move(dk));
  dv = stored<S>(std::move(dv));
  const auto gq = linear_backward<S>(x, a.wq, dq, Split::column), gk = linear_backward<S>(x, a.wk, dk, Split::column),
             gv = linear_backward<S>(x, a.wv, dv, Split::column);
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
template <class S>
Mat<S> dropout(const Mat<S>& x, double p, std::uint64_t seed, std::uint64_t tensor) {
  Mat<S> y(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j)
      y(i, j) = p > 0 && shardalg::nn::dropout_uniform(seed, tensor, i, j) < p ? S(0.0) : x(i, j) / S(1.0 - p);
  return stored<S>(std::move(y));
}

// ---- pre-LN transformer block ----------------------------------------------------------------------------
template <class S>
struct BlockOf {
  NormOf<S> ln1;
  AttnOf<S> attn;
  NormOf<S> ln2;
  MlpOf<S> mlp;
  double p = 0;
  std::uint64_t seed = 0, drop_attn = 0, drop_mlp = 0;  // tensor ids of the two dropout sites
};
template <class S>
struct BlockOutOf {
  NormOutOf<S> l1;
  AttnOutOf<S> a;
  Mat<S> y1;
  NormOutOf<S> l2;
  MlpOutOf<S> m;
  Mat<S> y;
};
template <class S>
struct BlockGradsOf {
  Mat<S> dx;
  NormGradsOf<S> ln1, ln2;
  AttnGradsOf<S> attn;
  MlpGradsOf<S> mlp;
};
using Block = BlockOf<double>;
using BlockOut = BlockOutOf<double>;
using BlockGrads = BlockGradsOf<double>;
template <class S>
BlockOutOf<S> block_forward(const BlockOf<S>& b, const Mat<Same<S>>& x) {
  BlockOutOf<S> o;
  o.l1 = norm_forward(b.ln1, x);
  o.a = attn_forward(b.attn, o.l1.y);
  o.y1 = stored<S>(x + dropout<S>(o.a.z, b.p, b.seed, b.drop_attn));
  o.l2 = norm_forward(b.ln2, o.y1);
  o.m = mlp_forward(b.mlp, o.l2.y);
  o.y = stored<S>(o.y1 + dropout<S>(o.m.z, b.p, b.seed, b.drop_mlp));
  return o;
}
template <class S>
BlockGradsOf<S> block_backward(const BlockOf<S>& b, const Mat<Same<S>>& x, const BlockOutOf<S>& o, const Mat<Same<S>>& dy) {
  BlockGradsOf<S> g;
  g.mlp = mlp_backward(b.mlp, o.l2.y, o.m, dropout<S>(dy, b.p, b.seed, b.drop_mlp));
  g.ln2 = norm_backward(b.ln2, o.l2, g.mlp.dx);
  const Mat<S> dy1 = stored<S>(dy + g.ln2.dx);
  g.attn = attn_backward(b.attn, o.l1.y, o.a, dropout<S>(dy1, b.p, b.seed, b.drop_attn));
  g.ln1 = norm_backward(b.ln1, o.l1, g.attn.dx);
  g.dx = stored<S>(dy1 + g.ln1.dx);
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
// The whole model on one "device": E[vocab, h] looks tokens up and, transposed, is the LM head
// (tied); the loss is the mean token cross-entropy with PyTorch's label smoothing (the target
// distribution is (1 − ε)·onehot + ε/V: the target gets 1 − ε + ε/V, every other class ε/V) and
// ignore_index.
template <class S>
struct GptOf {
  Mat<S> emb;  // [vocab, h]
  std::vector<BlockOf<S>> blocks;
  NormOf<S> final_norm;
  double p_emb = 0;  // dropout on the embedding output
  std::uint64_t seed = 0, drop_emb = 0;
};
template <class S>
struct GptOutOf {
  Mat<S> x0;                           // embedding output after dropout
  std::vector<BlockOutOf<S>> blocks;   // blocks[i].y is the input of block i + 1
  NormOutOf<S> fn;
  Mat<S> logits;                       // [T, vocab]
  Vec<S> loss;                         // per token (0 where ignored)
  S mean = S(0.0);
  int count = 0;
  Mat<S> dlogits;                      // d mean / d logits
};
template <class S>
struct GptGradsOf {
  Mat<S> demb;
  std::vector<BlockGradsOf<S>> blocks;
  NormGradsOf<S> fn;
};
using Gpt = GptOf<double>;
using GptOut = GptOutOf<double>;
using GptGrads = GptGradsOf<double>;
template <class S>
GptOutOf<S> gpt_forward(const GptOf<S>& g, const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& targets,
                        double eps_smooth = 0.0, std::int64_t ignore = -100) {
  using std::exp, std::log, std::max;
  GptOutOf<S> o;
  const Index t = static_cast<Index>(tokens.size()), h = g.emb.cols(), v = g.emb.rows();
  Mat<S> x(t, h);
  for (Index i = 0; i < t; ++i) x.row(i) = g.emb.row(tokens[static_cast<std::size_t>(i)]);
  o.x0 = dropout<S>(x, g.p_emb, g.seed, g.drop_emb);
  const Mat<S>* in = &o.x0;
  for (const auto& b : g.blocks) {
    o.blocks.push_back(block_forward(b, *in));
    in = &o.blocks.back().y;
  }
  o.fn = norm_forward(g.final_norm, *in);
  o.logits = o.fn.y * g.emb.transpose();
  o.loss = Vec<S>::Zero(t);
  o.dlogits = Mat<S>::Zero(t, v);
  for (Index i = 0; i < t; ++i) {
    const auto tg = targets[static_cast<std::size_t>(i)];
    if (tg == ignore) continue;
    ++o.count;
    S mx = o.logits(i, 0);
    for (Index j = 1; j < v; ++j) mx = max(mx, o.logits(i, j));
    S z = S(0.0);
    for (Index j = 0; j < v; ++j) z += exp(S(o.logits(i, j) - mx));
    const S lz = log(z);
    for (Index j = 0; j < v; ++j) {
      const double q = (j == tg ? 1.0 - eps_smooth : 0.0) + eps_smooth / double(v);
      const S logp = o.logits(i, j) - mx - lz;
      if (q != 0.0) o.loss(i) -= S(q) * logp;
      o.dlogits(i, j) = q != 0.0 ? exp(logp) - S(q) : exp(logp);
    }
  }
  if (o.count > 0) {
    o.mean = o.loss.sum() / S(double(o.count));
    o.dlogits /= S(double(o.count));
  }
  return o;
}
template <class S>
GptGradsOf<S> gpt_backward(const GptOf<S>& g, const std::vector<std::int64_t>& tokens, const GptOutOf<S>& o) {
  GptGradsOf<S> r;
  r.demb = o.dlogits.transpose() * o.fn.y;  // the head's part
  r.fn = norm_backward(g.final_norm, o.fn, o.dlogits * g.emb);
  Mat<S> dx = r.fn.dx;
  r.blocks.resize(g.blocks.size());
  for (std::size_t k = g.blocks.size(); k-- > 0;) {
    const Mat<S>& in = k == 0 ? o.x0 : o.blocks[k - 1].y;
    r.blocks[k] = block_backward(g.blocks[k], in, o.blocks[k], dx);
    dx = r.blocks[k].dx;
  }
  dx = dropout<S>(dx, g.p_emb, g.seed, g.drop_emb);
  for (std::size_t i = 0; i < tokens.size(); ++i) r.demb.row(tokens[i]) += dx.row(static_cast<Index>(i));  // lookup's part
  return r;
}

// ---- the same model over another scalar -------------------------------------------------------------
/// Every tensor of the model converted to S2 (precision::Running<F> for the derived error bounds
/// of a program in format F: the weights are its constants).
template <class S2, class S>
Mat<S2> cast(const Mat<S>& m) {
  return m.unaryExpr([](const S& x) { return S2(x); });
}
template <class S2, class S>
NormOf<S2> cast(const NormOf<S>& n) {
  return {cast<S2>(n.gamma), cast<S2>(n.beta), n.center, n.eps};
}
template <class S2, class S>
AttnOf<S2> cast(const AttnOf<S>& a) {
  return {cast<S2>(a.wq), cast<S2>(a.bq), cast<S2>(a.wk), cast<S2>(a.bk), cast<S2>(a.wv), cast<S2>(a.bv), cast<S2>(a.wo),
          cast<S2>(a.bo), a.heads,        a.groups,       a.seq,          a.p,            a.seed,         a.tensor,
          a.batch0};
}
template <class S2, class S>
MlpOf<S2> cast(const MlpOf<S>& m) {
  return {cast<S2>(m.w1), cast<S2>(m.b1), cast<S2>(m.wu), cast<S2>(m.bu), cast<S2>(m.w2), cast<S2>(m.b2), m.act};
}
template <class S2, class S>
GptOf<S2> cast(const GptOf<S>& g) {
  GptOf<S2> r{cast<S2>(g.emb), {}, cast<S2>(g.final_norm), g.p_emb, g.seed, g.drop_emb};
  for (const auto& b : g.blocks)
    r.blocks.push_back({cast<S2>(b.ln1), cast<S2>(b.attn), cast<S2>(b.ln2), cast<S2>(b.mlp), b.p, b.seed, b.drop_attn, b.drop_mlp});
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
