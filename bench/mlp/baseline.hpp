// bench/mlp/baseline.hpp — the hand-written baselines of bench/mlp, written the way a
// performance engineer writes them without shardalg: buffers allocated once and reused, cblas
// for every product, in-place MPI_Allreduce, and the passes between the GEMMs fused and
// vectorised with Eigen array expressions (bias + GeLU in one pass; dGeLU × dA and the bias
// gradient's column sum in one pass; LayerNorm statistics and normalisation per row; softmax
// and its backward per row; the residual adds in place). One rank's share at TP = P.
//
// NaiveMlp is the baseline bench/mlp had before issue 18, kept and labelled naive: GeLU through
// a function pointer (scalar), the bias in its own pass, Eigen's strided column sums, a new
// matrix per step. It shows what those choices cost.
#pragma once

#include <cblas.h>
#include <mpi.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

namespace bench {

using Mf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rf = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;

/// C = op(A)·op(B) (+ C when acc), row-major, whole matrices.
inline void gemm(const Mf& a, bool ta, const Mf& b, bool tb, Mf& c, bool acc = false, float alpha = 1) {
  const int m = static_cast<int>(c.rows()), n = static_cast<int>(c.cols()), k = static_cast<int>(ta ? a.rows() : a.cols());
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.data(),
              static_cast<int>(a.cols()), b.data(), static_cast<int>(b.cols()), acc ? 1.0f : 0.0f, c.data(), n);
}
/// The same on raw blocks with leading dimensions (attention's per-head slices).
inline void gemm(const float* a, int lda, bool ta, const float* b, int ldb, bool tb, float* c, int ldc, int m, int n,
                 int k, float alpha = 1, float beta = 0) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
inline void allreduce(Mf& m) { MPI_Allreduce(MPI_IN_PLACE, m.data(), static_cast<int>(m.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }

constexpr float kK = 0.7978845608028654f, kC = 0.044715f;
/// GeLU-tanh and its derivative as Eigen array expressions (vectorised at the build's width).
template <class A>
auto gelu(const A& x) {
  return 0.5f * x * (1.0f + (kK * (x + kC * x.cube())).tanh());
}
/// dA ⊙ gelu'(H) given t = tanh(u).
template <class A, class Tn, class D>
auto gelu_grad_times(const A& x, const Tn& t, const D& da) {
  return da * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t.square()) * kK * (1.0f + 3.0f * kC * x.square()));
}

/// Σ over rows into acc (acc += each row), streaming.
inline void add_rows(const Mf& x, Rf& acc) {
  acc.setZero();
  for (Eigen::Index i = 0; i < x.rows(); ++i) acc += x.row(i);
}

/// The tensor-parallel MLP (with biases): fc1 column-parallel, GeLU, fc2 row-parallel.
struct StrongMlp {
  Eigen::Index m, h, f;  // tokens, hidden, ffn / P
  Mf w1, w2;             // [h, f], [f, h]
  Rf b1, b2;
  // activations and gradients, allocated once
  Mf hpre, a, z, da, dw2, dw1, dx;
  Rf db1, db2, t;

  StrongMlp(Eigen::Index tokens, Eigen::Index hidden, Eigen::Index ffn_local)
      : m(tokens), h(hidden), f(ffn_local), w1(Mf::Random(h, f) * 0.02f), w2(Mf::Random(f, h) * 0.02f),
        b1(Rf::Random(f) * 0.02f), b2(Rf::Random(h) * 0.02f), hpre(m, f), a(m, f), z(m, h), da(m, f), dw2(f, h),
        dw1(h, f), dx(m, h), db1(f), db2(h), t(f) {}

  /// x → z (replicated), keeping hpre and a.
  void forward(const Mf& x) {
    gemm(x, false, w1, false, hpre);
    for (Eigen::Index i = 0; i < m; ++i) {  // bias + GeLU, one pass
      hpre.row(i) += b1;
      a.row(i).array() = gelu(hpre.row(i).array());
    }
    gemm(a, false, w2, false, z);
    allreduce(z);  // g
    z.rowwise() += b2;
  }
  /// dz → dx (replicated) and the parameter gradients.
  void backward(const Mf& x, const Mf& dz) {
    gemm(dz, false, w2, true, da);  // dA = dZ·W2ᵀ
    gemm(a, true, dz, false, dw2);  // dW2 = Aᵀ·dZ
    add_rows(dz, db2);
    db1.setZero();
    for (Eigen::Index i = 0; i < m; ++i) {  // dH = dA ⊙ gelu'(H) in place, db1 in the same pass
      auto hr = hpre.row(i).array();
      t.array() = (kK * (hr + kC * hr.cube())).tanh();
      da.row(i).array() = gelu_grad_times(hr, t.array(), da.row(i).array());
      db1 += da.row(i);
    }
    gemm(x, true, da, false, dw1);   // dW1 = Xᵀ·dH
    gemm(da, false, w1, true, dx);   // dX = dH·W1ᵀ
    allreduce(dx);                   // f's adjoint
  }
};

/// LayerNorm on whole rows, per row: statistics and normalisation while the row is in L1.
struct StrongNorm {
  Rf gamma, beta, dgamma, dbeta;
  Mf xhat;
  Eigen::VectorXf rstd;
  StrongNorm(Eigen::Index m, Eigen::Index h)
      : gamma(Rf::Ones(h)), beta(Rf::Zero(h)), dgamma(h), dbeta(h), xhat(m, h), rstd(m) {}
  void forward(const Mf& x, Mf& y) {
    const float n = static_cast<float>(x.cols());
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const float mean = x.row(i).sum() / n;
      const float var = (x.row(i).array() - mean).square().sum() / n;
      rstd(i) = 1.0f / std::sqrt(var + 1e-5f);
      xhat.row(i).array() = (x.row(i).array() - mean) * rstd(i);
      y.row(i).array() = xhat.row(i).array() * gamma.array() + beta.array();
    }
  }
  /// dx += LN'(dy) (the residual's gradient added in the same pass); dγ, dβ summed as it goes.
  void backward_add(const Mf& dy, Mf& dx) {
    const float n = static_cast<float>(dy.cols());
    dgamma.setZero();
    dbeta.setZero();
    for (Eigen::Index i = 0; i < dy.rows(); ++i) {
      const auto g = (dy.row(i).array() * gamma.array()).eval();
      const float mg = g.sum() / n, mgx = (g * xhat.row(i).array()).sum() / n;
      dx.row(i).array() += (g - mg - xhat.row(i).array() * mgx) * rstd(i);
      dgamma.array() += dy.row(i).array() * xhat.row(i).array();
      dbeta += dy.row(i);
    }
  }
};

/// Causal multi-head attention, tensor-parallel by heads (P ranks), with biases. The queries go
/// in tiles of kTile rows and the tiles right of the diagonal (all masked) are skipped, forward
/// and backward — as shardalg's kernel does (backend/cpu/kernels.hpp), so the two do the same GEMM work.
struct StrongAttention {
  static constexpr int kTile = 64;
  Eigen::Index m, h, heads, d, seq;  // heads: local
  Mf wqkv, wo, qkv, o, probs, dqkv, do_, dwqkv, dwo, dp, dx, z;
  Rf bqkv, bo, dbqkv, dbo;
  StrongAttention(Eigen::Index tokens, Eigen::Index hidden, Eigen::Index heads_local, Eigen::Index head_dim, Eigen::Index s)
      : m(tokens), h(hidden), heads(heads_local), d(head_dim), seq(s), wqkv(Mf::Random(h, 3 * heads * d) * 0.02f),
        wo(Mf::Random(heads * d, h) * 0.02f), qkv(m, 3 * heads * d), o(m, heads * d), probs((m / s) * heads * s, s),
        dqkv(m, 3 * heads * d), do_(m, heads * d), dwqkv(h, 3 * heads * d), dwo(heads * d, h), dp(s, s), dx(m, h),
        z(m, h), bqkv(Rf::Random(3 * heads * d) * 0.02f), bo(Rf::Random(h) * 0.02f), dbqkv(3 * heads * d), dbo(h) {}

  // column layout of qkv: [q heads | k heads | v heads], each head d wide
  int ld() const { return static_cast<int>(qkv.cols()); }
  float* col(Mf& x, Eigen::Index r0, Eigen::Index c0) { return x.data() + r0 * x.cols() + c0; }

  void forward(const Mf& x) {
    gemm(x, false, wqkv, false, qkv);
    qkv.rowwise() += bqkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int S = static_cast<int>(seq), D = static_cast<int>(d);
    for (Eigen::Index b = 0; b < m / seq; ++b)
      for (Eigen::Index hd = 0; hd < heads; ++hd) {
        float* q = col(qkv, b * seq, hd * d);
        float* k = col(qkv, b * seq, (heads + hd) * d);
        float* v = col(qkv, b * seq, (2 * heads + hd) * d);
        float* p = probs.data() + ((b * heads + hd) * seq) * seq;
        for (int i0 = 0; i0 < S; i0 += kTile) {  // query tiles: tile [i0, i1) meets the keys [0, i1) only
          const int i1 = std::min(i0 + kTile, S), r = i1 - i0;
          gemm(q + i0 * ld(), ld(), false, k, ld(), true, p + i0 * S, S, r, i1, D, scale);  // S = QKᵀ/√d
          for (int i = i0; i < i1; ++i) {  // causal softmax, row by row
            Eigen::Map<Rf> row(p + i * seq, seq);
            auto live = row.head(i + 1).array();
            live = (live - live.maxCoeff()).exp();
            live /= live.sum();
            row.tail(seq - i - 1).setZero();
          }
          gemm(p + i0 * S, S, false, v, ld(), false, col(o, b * seq + i0, hd * d), static_cast<int>(o.cols()), r, D, i1);  // O = PV
        }
      }
    gemm(o, false, wo, false, z);
    allreduce(z);
    z.rowwise() += bo;
  }
  void backward(const Mf& x, const Mf& dz) {
    gemm(dz, false, wo, true, do_);
    gemm(o, true, dz, false, dwo);
    add_rows(dz, dbo);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int S = static_cast<int>(seq), D = static_cast<int>(d);
    for (Eigen::Index b = 0; b < m / seq; ++b)
      for (Eigen::Index hd = 0; hd < heads; ++hd) {
        float* q = col(qkv, b * seq, hd * d);
        float* k = col(qkv, b * seq, (heads + hd) * d);
        float* v = col(qkv, b * seq, (2 * heads + hd) * d);
        const float* p = probs.data() + ((b * heads + hd) * seq) * seq;
        float* dO = col(do_, b * seq, hd * d);
        const int ldo = static_cast<int>(do_.cols());
        for (int i0 = 0; i0 < S; i0 += kTile) {  // query tiles: dP, dS, dQ on the keys [0, i1)
          const int i1 = std::min(i0 + kTile, S), r = i1 - i0;
          gemm(dO + i0 * ldo, ldo, false, v, ld(), true, dp.data() + i0 * S, S, r, i1, D);  // dP = dO Vᵀ
          for (int i = i0; i < i1; ++i) {  // dS = P ⊙ (dP − rowdot), in place
            Eigen::Map<const Rf> pr(p + i * seq, i1);
            auto dr = dp.row(i).head(i1);
            const float dot = dr.dot(pr);
            dr.array() = pr.array() * (dr.array() - dot);
          }
          gemm(dp.data() + i0 * S, S, false, k, ld(), false, col(dqkv, b * seq + i0, hd * d), ld(), r, D, i1, scale);  // dQ
        }
        for (int k0 = 0; k0 < S; k0 += kTile) {  // key tiles: the queries i ≥ k0 reach them
          const int kr = std::min(kTile, S - k0), rows = S - k0;
          gemm(dp.data() + k0 * S + k0, S, true, q + k0 * ld(), ld(), false, col(dqkv, b * seq + k0, (heads + hd) * d), ld(),
               kr, D, rows, scale);  // dK = dSᵀQ/√d
          gemm(p + k0 * S + k0, S, true, dO + k0 * ldo, ldo, false, col(dqkv, b * seq + k0, (2 * heads + hd) * d), ld(), kr,
               D, rows);  // dV = PᵀdO
        }
      }
    add_rows(dqkv, dbqkv);
    gemm(x, true, dqkv, false, dwqkv);
    gemm(dqkv, false, wqkv, true, dx);
    allreduce(dx);
  }
};

/// The pre-LN block: x → LN1 → attention → + x → LN2 → MLP → + y1, and back.
struct StrongBlock {
  StrongNorm ln1, ln2;
  StrongAttention attn;
  StrongMlp mlp;
  Mf l1, y1, l2, y, dy1, dx;
  StrongBlock(Eigen::Index m, Eigen::Index h, Eigen::Index heads_local, Eigen::Index d, Eigen::Index seq, Eigen::Index ffn_local)
      : ln1(m, h), ln2(m, h), attn(m, h, heads_local, d, seq), mlp(m, h, ffn_local), l1(m, h), y1(m, h), l2(m, h), y(m, h),
        dy1(m, h), dx(m, h) {}
  void forward(const Mf& x) {
    ln1.forward(x, l1);
    attn.forward(l1);
    y1 = x + attn.z;
    ln2.forward(y1, l2);
    mlp.forward(l2);
    y = y1 + mlp.z;
  }
  void backward(const Mf& dyv) {
    mlp.backward(l2, dyv);
    dy1 = dyv;
    ln2.backward_add(mlp.dx, dy1);  // dY1 = dY + LN2'(dX_mlp)
    attn.backward(l1, dy1);
    dx = dy1;
    ln1.backward_add(attn.dx, dx);
  }
};

/// The pre-issue-18 baseline (naive): scalar GeLU, separate passes, fresh matrices each step.
struct NaiveMlp {
  Mf x, w1, b1, w2, b2;
  NaiveMlp(Eigen::Index m, Eigen::Index h, Eigen::Index f)
      : x(Mf::Random(m, h)), w1(Mf::Random(h, f) * 0.02f), b1(Mf::Zero(1, f)), w2(Mf::Random(f, h) * 0.02f), b2(Mf::Zero(1, h)) {}
  static float gelu_s(float v) { return 0.5f * v * (1.0f + std::tanh(kK * (v + kC * v * v * v))); }
  static float gelu_d(float v) {
    const float t = std::tanh(kK * (v + kC * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kK * (1.0f + 3.0f * kC * v * v);
  }
  void step() {
    const auto m = x.rows(), h = x.cols(), f = w1.cols();
    Mf hpre(m, f), a(m, f), z(m, h);
    gemm(x, false, w1, false, hpre);
    hpre.rowwise() += b1.row(0);
    a = hpre.unaryExpr(&gelu_s);
    gemm(a, false, w2, false, z);
    allreduce(z);
    z.rowwise() += b2.row(0);
    Mf da(m, f), dw2(f, h), dh(m, f), dw1(h, f), dx(m, h);
    gemm(z, false, w2, true, da);
    gemm(a, true, z, false, dw2);
    Mf db2 = z.colwise().sum();
    dh = da.cwiseProduct(hpre.unaryExpr(&gelu_d));
    gemm(x, true, dh, false, dw1);
    Mf db1 = dh.colwise().sum();
    gemm(dh, false, w1, true, dx);
    allreduce(dx);
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(db1.data());
    benchmark::DoNotOptimize(db2.data());
  }
};

}  // namespace bench
