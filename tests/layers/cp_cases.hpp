// tests/layers/cp_cases.hpp — ring attention on a context-parallel group against causal attention
// written out whole (every s × s matrix), shared by the thread and MPI tests.
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

}  // namespace cpt
