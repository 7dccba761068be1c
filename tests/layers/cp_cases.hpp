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
template <class T>
Result ring_case(shardalg::Group& g, const Shape& s, bool overlap, unsigned seed = 1) {
  using RA = shardalg::nn::RingAttention<T>;
  using MT = typename RA::Mat;
  const Index n = s.batch * s.seq;
  const Md q = random(n, s.heads * s.d, seed), k = random(n, s.groups * s.d, seed + 1), v = random(n, s.groups * s.d, seed + 2),
           dout = random(n, s.heads * s.d, seed + 3);
  const Dense ref = dense_attention(s, q, k, v, dout);
  const shardalg::nn::CpTokens tok{s.seq, s.batch, g.size(), g.rank()};
  const shardalg::nn::RingAttentionConfig cfg{s.heads, s.groups, s.d, overlap};
  const MT ql = tok.take(q).template cast<T>(), kl = tok.take(k).template cast<T>(), vl = tok.take(v).template cast<T>(),
           dol = tok.take(dout).template cast<T>();
  const auto f = RA::forward(g, tok, cfg, ql, kl, vl);
  const auto gr = RA::backward(g, tok, cfg, ql, kl, vl, f, dol);
  return {rel(f.o.template cast<double>(), tok.take(ref.o)), rel(f.lse.template cast<double>(), tok.take(ref.lse)),
          rel(gr.dq.template cast<double>(), tok.take(ref.dq)), rel(gr.dk.template cast<double>(), tok.take(ref.dk)),
          rel(gr.dv.template cast<double>(), tok.take(ref.dv)), f.blocks};
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
  const Index n = s.batch * s.seq;
  const Md q = random(n, s.heads * s.d, seed), k = random(n, s.groups * s.d, seed + 1), v = random(n, s.groups * s.d, seed + 2),
           dout = random(n, s.heads * s.d, seed + 3);
  const Dense ref = dense_attention(s, q, k, v, dout);
  const shardalg::nn::CpTokens tok{s.seq, s.batch, g.size(), g.rank()};
  const shardalg::nn::RingAttentionConfig cfg{s.heads, s.groups, s.d, true};
  const MT ql = tok.take(q).template cast<T>(), kl = tok.take(k).template cast<T>(), vl = tok.take(v).template cast<T>(),
           dol = tok.take(dout).template cast<T>();
  const auto f = UA::forward(g, tok, cfg, ql, kl, vl);
  const auto gr = UA::backward(g, tok, cfg, f, dol);
  const auto rf = RA::forward(g, tok, cfg, ql, kl, vl);
  const auto rg = RA::backward(g, tok, cfg, ql, kl, vl, rf, dol);
  auto d = [](const MT& a, const MT& b) { return rel(a.template cast<double>(), b.template cast<double>()); };
  const double vs = std::max({d(f.o, rf.o), d(gr.dq, rg.dq), d(gr.dk, rg.dk), d(gr.dv, rg.dv)});
  return {{rel(f.o.template cast<double>(), tok.take(ref.o)), 0, rel(gr.dq.template cast<double>(), tok.take(ref.dq)),
           rel(gr.dk.template cast<double>(), tok.take(ref.dk)), rel(gr.dv.template cast<double>(), tok.take(ref.dv)), 0},
          vs};
}

}  // namespace cpt
