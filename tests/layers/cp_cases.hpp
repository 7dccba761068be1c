// tests/layers/cp_cases.hpp — ring attention on a context-parallel group against causal attention
// written out whole (every s × s matrix), shared by the thread and MPI tests; in 16-bit storage,
// each element against its derived bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/nn/layers/ring_attention.hpp"
#include "shardalg/nn/layers/ulysses_attention.hpp"
#include "shardalg/precision/rounding.hpp"

namespace cpt {

using shardalg::Index;
using Md = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Shape {
  Index batch, seq, heads, groups, d;
};

/// Causal attention on the whole batch (rows batch-major), forward and backward, full matrices:
/// P = softmax(mask(Q Kᵀ/√d)), O = P V; dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − rowsum(P ∘ dO Vᵀ)).
struct Dense {
  Md o, lse, dq, dk, dv;
};
inline Dense dense_attention(const Shape& s, const Md& q, const Md& k, const Md& v, const Md& dout) {
  const Index rep = s.heads / s.groups, n = s.batch * s.seq;
  Dense r{Md::Zero(n, s.heads * s.d), Md::Zero(n, s.heads), Md::Zero(n, s.heads * s.d), Md::Zero(n, s.groups * s.d),
          Md::Zero(n, s.groups * s.d)};
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      const Index g = h / rep, r0 = b * s.seq;
      const Md qb = q.block(r0, h * s.d, s.seq, s.d), kb = k.block(r0, g * s.d, s.seq, s.d), vb = v.block(r0, g * s.d, s.seq, s.d);
      const Md dob = dout.block(r0, h * s.d, s.seq, s.d);
      Md p = qb * kb.transpose() / std::sqrt(double(s.d));
      for (Index i = 0; i < s.seq; ++i) {
        const double mx = p.row(i).head(i + 1).maxCoeff();
        double z = 0;
        for (Index j = 0; j < s.seq; ++j) z += j <= i ? std::exp(p(i, j) - mx) : 0.0;
        r.lse(r0 + i, h) = mx + std::log(z);
        for (Index j = 0; j < s.seq; ++j) p(i, j) = j <= i ? std::exp(p(i, j) - mx) / z : 0.0;
      }
      r.o.block(r0, h * s.d, s.seq, s.d) = p * vb;
      const Md dp = dob * vb.transpose();
      Md ds = p.cwiseProduct(dp);
      for (Index i = 0; i < s.seq; ++i) ds.row(i) = p.row(i).cwiseProduct(dp.row(i)) - p.row(i) * ds.row(i).sum();
      r.dq.block(r0, h * s.d, s.seq, s.d) += ds * kb / std::sqrt(double(s.d));
      r.dk.block(r0, g * s.d, s.seq, s.d) += ds.transpose() * qb / std::sqrt(double(s.d));
      r.dv.block(r0, g * s.d, s.seq, s.d) += p.transpose() * dob;
    }
  return r;
}

inline Md random(Index r, Index c, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> u;
  Md m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(g);
  return m;
}

inline double rel(const Md& a, const Md& b) { return (a - b).norm() / b.norm(); }

/// One rank's errors (O, lse, dQ, dK, dV against the whole-batch computation's rows of this rank)
/// and its block count, for ring attention on `g` in element type T.
struct Result {
  double o, lse, dq, dk, dv;
  Index blocks;
};
/// One case's inputs: the whole batch's Q, K, V, dO (double), the whole computation, this rank's
/// rows in T.
template <class T>
struct Case {
  using MT = typename shardalg::nn::RingAttention<T>::Mat;
  Dense ref;
  shardalg::nn::CpTokens tok;
  shardalg::nn::RingAttentionConfig cfg;
  MT q, k, v, dout;
  Case(const shardalg::Group& g, const Shape& s, bool overlap, unsigned seed) {
    const Index n = s.batch * s.seq;
    const Md qd = random(n, s.heads * s.d, seed), kd = random(n, s.groups * s.d, seed + 1), vd = random(n, s.groups * s.d, seed + 2),
             dd = random(n, s.heads * s.d, seed + 3);
    ref = dense_attention(s, qd, kd, vd, dd);
    tok = {s.seq, s.batch, g.size(), g.rank()};
    cfg = {s.heads, s.groups, s.d, overlap};
    q = tok.take(qd).template cast<T>();
    k = tok.take(kd).template cast<T>();
    v = tok.take(vd).template cast<T>();
    dout = tok.take(dd).template cast<T>();
  }
  /// ‖got − this rank's rows of want‖ / ‖those rows‖.
  double err(const MT& got, const Md& want) const { return rel(got.template cast<double>(), tok.take(want)); }
};

template <class T>
Result ring_case(shardalg::Group& g, const Shape& s, bool overlap, unsigned seed = 1) {
  using RA = shardalg::nn::RingAttention<T>;
  const Case<T> c(g, s, overlap, seed);
  const auto f = RA::forward(g, c.tok, c.cfg, c.q, c.k, c.v);
  const auto gr = RA::backward(g, c.tok, c.cfg, c.q, c.k, c.v, f, c.dout);
  return {c.err(f.o, c.ref.o), c.err(f.lse, c.ref.lse), c.err(gr.dq, c.ref.dq), c.err(gr.dk, c.ref.dk), c.err(gr.dv, c.ref.dv), f.blocks};
}

/// The same for all-to-all (Ulysses) attention; also its distance from the ring's results.
struct UlyssesResult {
  Result r;
  double vs_ring;
};
template <class T>
UlyssesResult ulysses_case(shardalg::Group& g, const Shape& s, unsigned seed = 1) {
  using UA = shardalg::nn::UlyssesAttention<T>;
  using RA = shardalg::nn::RingAttention<T>;
  using MT = typename UA::Mat;
  const Case<T> c(g, s, true, seed);
  const auto f = UA::forward(g, c.tok, c.cfg, c.q, c.k, c.v);
  const auto gr = UA::backward(g, c.tok, c.cfg, f, c.dout);
  const auto rf = RA::forward(g, c.tok, c.cfg, c.q, c.k, c.v);
  const auto rg = RA::backward(g, c.tok, c.cfg, c.q, c.k, c.v, rf, c.dout);
  auto d = [](const MT& a, const MT& b) { return rel(a.template cast<double>(), b.template cast<double>()); };
  const double vs = std::max({d(f.o, rf.o), d(gr.dq, rg.dq), d(gr.dk, rg.dk), d(gr.dv, rg.dv)});
  return {{c.err(f.o, c.ref.o), 0, c.err(gr.dq, c.ref.dq), c.err(gr.dk, c.ref.dk), c.err(gr.dv, c.ref.dv), 0}, vs};
}

// ---- 16-bit storage: each element against its first-order bound (nn/layers/ring_attention.hpp) ----

/// The bound of each output (whole batch, the dense layout of cp_cases.hpp), u = T's unit roundoff,
/// from the exact computation `r` on the rounded inputs. Per (sequence, head), with P the causal
/// softmax, D_i = dO_i·O_i, dP_ij = dO_i·V_j:
///   fp32 terms: g = (s + d + 16)·2⁻²⁴, P's relative error e = g·(2 + max Σ|q||k|/√d + max|L|);
///   each fp32 result within (e + g)·M of exact, M the same sum over absolute values;
///   B_O = u|O| + (1+u)(e+g)·ΣP|V|;  B_D = Σ|dO|·B_O + g·Σ|dO||O| (D is computed from the rounded O);
///   B_dV = u|dV| + (1+u)(e+g)·ΣPᵀ|dO|;
///   B_dQ = u|dQ| + (1+u)(Σ_j P_ij·B_D_i·|K_j|/√d + (e+g)·Σ_j P_ij(|dO_i||V_j| + |D_i|)|K_j|/√d);
///   B_dK = u|dK| + (1+u)(Σ_i P_ij·B_D_i·|Q_i|/√d + (e+g)·Σ_i P_ij(|dO_i||V_j| + |D_i|)|Q_i|/√d).
inline Dense bounds_16bit(const Shape& s, const Md& q, const Md& k, const Md& v, const Md& dout, const Dense& r, double u) {
  const Index rep = s.heads / s.groups, n = s.batch * s.seq;
  const double g = double(s.seq + s.d + 16) * std::ldexp(1.0, -24), rd = 1.0 / std::sqrt(double(s.d));
  double smax = 0;
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h)
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j <= i; ++j) {
          const Index r0 = b * s.seq, gk = (h / rep) * s.d;
          smax = std::max(smax, q.block(r0 + i, h * s.d, 1, s.d).cwiseAbs().cwiseProduct(k.block(r0 + j, gk, 1, s.d).cwiseAbs()).sum() * rd);
        }
  const double e = g * (2 + smax + r.lse.cwiseAbs().maxCoeff()), f = e + g;
  Dense B{Md::Zero(n, s.heads * s.d), Md::Zero(n, s.heads), Md::Zero(n, s.heads * s.d), Md::Zero(n, s.groups * s.d),
               Md::Zero(n, s.groups * s.d)};
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      const Index r0 = b * s.seq, gk = (h / rep) * s.d, hd = h * s.d;
      const Md qb = q.block(r0, hd, s.seq, s.d), kb = k.block(r0, gk, s.seq, s.d), vb = v.block(r0, gk, s.seq, s.d);
      const Md dob = dout.block(r0, hd, s.seq, s.d), ob = r.o.block(r0, hd, s.seq, s.d);
      Md p = Md::Zero(s.seq, s.seq);
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j <= i; ++j) p(i, j) = std::exp(qb.row(i).dot(kb.row(j)) * rd - r.lse(r0 + i, h));
      const Md bo = u * ob.cwiseAbs() + (1 + u) * f * (p * vb.cwiseAbs());
      B.o.block(r0, hd, s.seq, s.d) = bo;
      Md bd(s.seq, 1), dabs(s.seq, 1);
      for (Index i = 0; i < s.seq; ++i) {
        bd(i) = dob.row(i).cwiseAbs().dot(bo.row(i)) + g * dob.row(i).cwiseAbs().dot(ob.row(i).cwiseAbs());
        dabs(i) = std::abs(dob.row(i).dot(ob.row(i)));
      }
      const Md mdp = dob.cwiseAbs() * vb.cwiseAbs().transpose();  // |dO||V|ᵀ
      Md wq(s.seq, s.seq), wf(s.seq, s.seq);                    // P·B_D and P·(|dP| + |D|)
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j < s.seq; ++j) {
          wq(i, j) = p(i, j) * bd(i);
          wf(i, j) = p(i, j) * (mdp(i, j) + dabs(i));
        }
      B.dq.block(r0, hd, s.seq, s.d) = (1 + u) * (wq * kb.cwiseAbs() + f * wf * kb.cwiseAbs()) * rd;
      B.dk.block(r0, gk, s.seq, s.d) += (1 + u) * (wq.transpose() * qb.cwiseAbs() + f * wf.transpose() * qb.cwiseAbs()) * rd;
      B.dv.block(r0, gk, s.seq, s.d) += (1 + u) * f * (p.transpose() * dob.cwiseAbs());
    }
  B.dq += u * r.dq.cwiseAbs();
  B.dk += u * r.dk.cwiseAbs();
  B.dv += u * r.dv.cwiseAbs();
  return B;
}

/// |got − want| ÷ bound, element by element.
inline std::vector<double> ratios(const Md& got, const Md& want, const Md& bound) {
  std::vector<double> out(static_cast<std::size_t>(got.size()));
  for (Index i = 0; i < got.size(); ++i) out[static_cast<std::size_t>(i)] = std::abs(got.data()[i] - want.data()[i]) / bound.data()[i];
  return out;
}
inline double median(std::vector<double> x) {
  std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2), x.end());
  return x[x.size() / 2];
}

struct Ratios {
  double o_max = 0, dq_max = 0, dk_max = 0, dv_max = 0;
  double o_med = 0, grad_med = 1;
};

/// One 16-bit case on this rank: the inputs rounded to T, the exact computation on them, ring
/// (or all-to-all) attention in T, each output's largest and median error ÷ bound on this rank's
/// rows.
template <class T>
Ratios case_16bit(shardalg::Group& g, const Shape& s, bool ulysses, unsigned seed) {
  using RA = shardalg::nn::RingAttention<T>;
  using MT = typename RA::Mat;
  const Index n = s.batch * s.seq;
  auto rounded = [](const Md& m) { return Md(m.template cast<T>().template cast<double>()); };
  const Md q = rounded(random(n, s.heads * s.d, seed)), k = rounded(random(n, s.groups * s.d, seed + 1)),
           v = rounded(random(n, s.groups * s.d, seed + 2)), dout = rounded(random(n, s.heads * s.d, seed + 3));
  const Dense ref = dense_attention(s, q, k, v, dout);
  const Dense bnd = bounds_16bit(s, q, k, v, dout, ref, shardalg::precision::unit_roundoff_v<T>);
  const shardalg::nn::CpTokens tok{s.seq, s.batch, g.size(), g.rank()};
  const shardalg::nn::RingAttentionConfig cfg{s.heads, s.groups, s.d, true};
  const MT ql = tok.take(q).template cast<T>(), kl = tok.take(k).template cast<T>(), vl = tok.take(v).template cast<T>(),
           dl = tok.take(dout).template cast<T>();
  MT o, dq, dk, dv;
  if (ulysses) {
    using UA = shardalg::nn::UlyssesAttention<T>;
    const auto f = UA::forward(g, tok, cfg, ql, kl, vl);
    const auto gr = UA::backward(g, tok, cfg, f, dl);
    o = f.o, dq = gr.dq, dk = gr.dk, dv = gr.dv;
  } else {
    const auto f = RA::forward(g, tok, cfg, ql, kl, vl);
    const auto gr = RA::backward(g, tok, cfg, ql, kl, vl, f, dl);
    o = f.o, dq = gr.dq, dk = gr.dk, dv = gr.dv;
  }
  auto rs = [&](const MT& got, const Md& want, const Md& b) { return ratios(got.template cast<double>(), tok.take(want), tok.take(b)); };
  const auto ro = rs(o, ref.o, bnd.o), rq = rs(dq, ref.dq, bnd.dq), rk = rs(dk, ref.dk, bnd.dk), rv = rs(dv, ref.dv, bnd.dv);
  auto mx = [](const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); };
  return {mx(ro), mx(rq), mx(rk), mx(rv), median(ro), std::min({median(rq), median(rk), median(rv)})};
}

}  // namespace cpt
