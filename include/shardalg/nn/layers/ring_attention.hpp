// shardalg/nn/layers/ring_attention.hpp — causal attention over a context-parallel group, with
// the sequence split (cp_tokens.hpp) and the K/V blocks passed around a ring.
//
//   Q[cp:Row], K[cp:Row], V[cp:Row]   this rank's chunks (rows), its heads (columns: Hq·d, G·d)
//   step t = 0 … cp−1: the K/V of rank (r − t) mod cp is here; attend to it, then pass it on:
//       isend K|V → rank r+1, irecv K|V ← rank r−1, posted before the block's compute (overlap)
//   per (sequence, head, query chunk, key chunk): S = Q Kᵀ/√d, causal by global position;
//   a key chunk after the query chunk is skipped whole, an earlier one needs no mask
//   online softmax: running max m, sum l, accumulator a; a block's (m', l', a') combines as
//       m* = max(m, m'),  l* = l·e^(m−m*) + l'·e^(m'−m*),  a* = a·e^(m−m*) + a'·e^(m'−m*)
//   (associative and commutative: the blocks may arrive in any order); O = a / l, and the
//   log-sum-exp L = m + log l is kept for the backward. No s × s matrix exists anywhere.
//
//   backward, with D = rowsum(dO ∘ O) per head: the probabilities are recomputed from L,
//       P = exp(S − L),  dV += Pᵀ dO,  dS = P ∘ (dO Vᵀ − D),  dQ += dS K/√d,  dK += dSᵀ Q/√d
//   the K/V travel the ring as forward; the dK/dV of a block travel with it, each rank adding its
//   share before passing them on, and one last hop brings them home: per rank cp − 1 K/V sends
//   forward; cp − 1 K/V sends and cp dK/dV sends backward. (Why L: with it every block's P is
//   exact on its own; without it the backward would need the whole row of scores again.)
//
// Messages are matched in posting order per pair of ranks; each carries what it is ("K|V" or
// "dK|dV" as its layout, the block's shape as dims) so that checked point to point refuses a mix-up.
// GQA: Hq query heads share G key/value heads (Hq/G each). CPU (Eigen) kernels; the K/V and
// dK/dV blocks travel as one message each.
//
// Attention dropout (cfg.drop): O = (P ⊙ F)·V with F the mask's factors at the global positions;
// l and L stay those of P (dropout comes after the softmax). Backward: dV += (P ⊙ F)ᵀ dO,
// dS = P ∘ (F ∘ dO Vᵀ − D), D = rowsum(dO ∘ O) as before (O is the dropped output).
//
// 16-bit storage (bf16, fp16): Q, K, V, dO, O, dQ, dK, dV are stored in T and the K/V blocks
// travel the ring in T; everything computed is fp32 (the compute type C): the scores, m, l and
// the accumulator a, the log-sum-exp L (kept in fp32 for the backward), D, dQ, and the dK|dV
// partial sums, which travel the ring in fp32 so that no hop rounds them. Each output is rounded
// to T once, at the end. The error against exact arithmetic on the same 16-bit inputs, to first
// order (u: T's unit roundoff; the fp32 terms, (s + d + 16)·2⁻²⁴ of the same sums over absolute
// values, are far smaller):
//   |ΔO|  ≤ u·|O|                     |ΔdV_j| ≤ u·|dV_j|
//   |ΔdQ_i| ≤ u·|dQ_i| + Σ_j P_ij·|ΔD_i|·|K_j|/√d,   |ΔdK_j| ≤ u·|dK_j| + Σ_i P_ij·|ΔD_i|·|Q_i|/√d
// with |ΔD_i| ≤ u·Σ|dO_i ∘ O_i| from the rounded O that D is computed from
// (docs/layers/context_parallel.md; tests/layers/test_context_parallel_16bit.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "shardalg/backend/kernels.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/nn/layers/cp_tokens.hpp"

namespace shardalg::nn {

struct RingAttentionConfig {
  Index heads = 0;   // query heads on this rank (Hq)
  Index groups = 0;  // key/value heads on this rank (G; 0 = heads)
  Index head_dim = 0;
  bool overlap = true;  // post the next block's receive before computing this one
  /// Dropout on the probabilities, keyed by (sequence, global head, query, key) positions: the
  /// dense layer's mask (backend/kernels.hpp), whatever the cp, tp or dp split. p = 0: none.
  AttnDropout drop = {};
  [[nodiscard]] Index kv_heads() const { return groups == 0 ? heads : groups; }
};

template <class T>
struct RingAttention {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  /// What is computed in: fp32 for 16-bit T, T otherwise.
  using C = std::conditional_t<HostHalf<T>, float, T>;
  using CMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  struct Forward {
    Mat o;     // [rows, Hq·d]
    CMat lse;  // [rows, Hq]: log-sum-exp of each query row's scores, per head
    Index blocks = 0;  // chunk blocks computed (per sequence and head): the causal balance
  };
  struct Grads {
    Mat dq, dk, dv;
  };

  static void check(const RingAttentionConfig& c, const CpTokens& tok, const Mat& q, const Mat& k, const Mat& v) {
    CpTokens::check(tok.seq, tok.cp);
    if (c.heads < 1 || c.kv_heads() < 1 || c.heads % c.kv_heads() != 0)
      throw DivisibilityError(shardalg::detail::cat("ring attention: ", c.heads, " query heads are not a multiple of ", c.kv_heads(), " key/value heads"));
    if (q.rows() != tok.rows() || k.rows() != tok.rows() || v.rows() != tok.rows() || q.cols() != c.heads * c.head_dim ||
        k.cols() != c.kv_heads() * c.head_dim || v.cols() != k.cols())
      throw ShapeError(shardalg::detail::cat("ring attention: Q ", q.rows(), "×", q.cols(), ", K ", k.rows(), "×", k.cols(), ", V ", v.rows(), "×",
                                   v.cols(), " do not fit ", tok.rows(), " rows of ", c.heads, " query and ", c.kv_heads(), " key/value heads of ",
                                   c.head_dim));
  }

  static Forward forward(Group& g, const CpTokens& tok, const RingAttentionConfig& c, const Mat& q, const Mat& k,
                         const Mat& v) {
    check(c, tok, q, k, v);
    const Index n = tok.rows(), hq = c.heads, d = c.head_dim;
    const int cp = g.size(), r = g.rank();
    Forward f;
    CMat o = CMat::Zero(n, hq * d);  // the accumulator a, then O
    f.lse = CMat::Constant(n, hq, -std::numeric_limits<C>::infinity());
    CMat l = CMat::Zero(n, hq);  // running sums; f.lse holds the running max until the end
    const auto& qc = compute(q);
    Mat cur = pack(k, v), next(cur.rows(), cur.cols());
    for (int t = 0; t < cp; ++t) {
      const int src = (r - t + cp) % cp;
      std::optional<Request> rs, rr;
      if (t + 1 < cp) {
        rr.emplace(g.irecv(next.data(), size_of(next), dtype_of<T>, (r - 1 + cp) % cp, info("K|V", next)));
        rs.emplace(g.isend(cur.data(), size_of(cur), dtype_of<T>, (r + 1) % cp, info("K|V", cur)));
        if (!c.overlap) rr->wait(), rs->wait();
      }
      f.blocks += forward_block(tok, c, src, qc, compute(cur), o, f.lse, l);
      if (rr) rr->wait(), rs->wait();
      if (t + 1 < cp) std::swap(cur, next);
    }
    for (Index i = 0; i < n; ++i)
      for (Index h = 0; h < hq; ++h) {
        o.row(i).segment(h * d, d) /= l(i, h);
        f.lse(i, h) += std::log(l(i, h));
      }
    f.o = to_storage(std::move(o));
    return f;
  }

  static Grads backward(Group& g, const CpTokens& tok, const RingAttentionConfig& c, const Mat& q, const Mat& k, const Mat& v,
                        const Forward& f, const Mat& dout) {
    check(c, tok, q, k, v);
    const Index n = tok.rows(), hq = c.heads, d = c.head_dim, gkv = c.kv_heads();
    const int cp = g.size(), r = g.rank(), next_rank = (r + 1) % cp, prev = (r - 1 + cp) % cp;
    const auto& qc = compute(q);
    const auto& doc = compute(dout);
    const auto& oc = compute(f.o);  // the stored (rounded) O, as a fused kernel reads it
    CMat dsum(n, hq);  // D = rowsum(dO ∘ O) per head
    for (Index i = 0; i < n; ++i)
      for (Index h = 0; h < hq; ++h) dsum(i, h) = doc.row(i).segment(h * d, d).dot(oc.row(i).segment(h * d, d));
    CMat dq = CMat::Zero(n, hq * d);
    Mat cur = pack(k, v), next(cur.rows(), cur.cols());
    // dK|dV of the block here, in two buffers: the one sent at step t − 1 may still be in flight
    // while step t fills the other. A send is waited two steps later, when its receiver has
    // reached the wait that takes it (an MPI rendezvous send, or a checked one, completes only
    // then): every wait is on a message of an earlier step, so the ring cannot wait on itself.
    CMat acc[2] = {CMat(n, 2 * gkv * d), CMat(n, 2 * gkv * d)}, in(n, 2 * gkv * d);
    std::optional<Request> sent[2];
    for (int t = 0; t < cp; ++t) {
      const int src = (r - t + cp) % cp;
      CMat& a = acc[t % 2];
      std::optional<Request> rs, rr, ra;
      if (t > 0) ra.emplace(g.irecv(in.data(), size_of(in), dtype_of<C>, prev, info("dK|dV", in)));  // block src's dK|dV so far
      if (t + 1 < cp) {
        rr.emplace(g.irecv(next.data(), size_of(next), dtype_of<T>, prev, info("K|V", next)));
        rs.emplace(g.isend(cur.data(), size_of(cur), dtype_of<T>, next_rank, info("K|V", cur)));
        if (!c.overlap) rr->wait(), rs->wait();
      }
      if (sent[t % 2]) sent[t % 2]->wait();  // this buffer's send, two steps ago
      a.setZero();
      backward_block(tok, c, src, qc, compute(cur), f.lse, doc, dsum, dq, a);
      if (ra) {
        ra->wait();
        a += in;
      }
      if (cp == 1) {  // no ring: the only block is this rank's own
        in = a;
        break;
      }
      // pass the block's dK|dV on: to the rank that holds its K/V next, or (last step) home
      sent[t % 2].emplace(g.isend(a.data(), size_of(a), dtype_of<C>, next_rank, info("dK|dV", a)));
      if (rr) rr->wait(), rs->wait();
      if (t + 1 < cp) std::swap(cur, next);
    }
    if (cp > 1) {  // this rank's own block, every rank's share in it; then the sends still in flight
      // (the receive first: a send may complete only once its receiver waits — checked MPI reads
      // a header before it posts the data — and the last send's receiver is the next rank's home)
      g.recv(in.data(), size_of(in), dtype_of<C>, prev, info("dK|dV", in));
      for (auto& sr : sent)
        if (sr) sr->wait();
    }
    return {to_storage(std::move(dq)), to_storage(in.leftCols(gkv * d)), to_storage(in.rightCols(gkv * d))};
  }

 private:
  /// A T matrix as the compute type: itself when they are the same, an fp32 copy for 16-bit T.
  static decltype(auto) compute(const Mat& m) {
    if constexpr (std::is_same_v<C, T>) return (m);
    else return CMat(m.template cast<C>());
  }
  /// A computed result stored in T: rounded once for 16-bit T.
  template <class M>
  static Mat to_storage(M&& m) {
    if constexpr (std::is_same_v<C, T>) return Mat(std::forward<M>(m));
    else return m.template cast<T>();
  }
  template <class M>
  static std::size_t size_of(const M& m) { return static_cast<std::size_t>(m.size()); }
  template <class M>
  static CallInfo info(std::string_view what, const M& m) {
    CallInfo ci;
    ci.layout_in = ci.layout_out = what;
    ci.dims = {m.rows(), m.cols(), -1};
    return ci;
  }
  static Mat pack(const Mat& k, const Mat& v) {
    Mat kv(k.rows(), k.cols() + v.cols());
    kv << k, v;
    return kv;
  }

  /// The (query chunk, key chunk) pairs of one sequence between this rank's chunks and `src`'s:
  /// calls fn(local query row 0, local key row 0, query position 0, key position 0) for each pair
  /// not masked whole (equal positions: the causal diagonal block).
  template <class Fn>
  static Index for_blocks(const CpTokens& tok, int src, Index b, Fn&& fn) {
    const Index c = tok.chunk();
    Index n = 0;
    for (int kq = 0; kq < 2; ++kq)
      for (int kk = 0; kk < 2; ++kk) {
        const Index qc = tok.chunk_of(tok.rank, kq), kc = tok.chunk_of(src, kk);
        if (kc > qc) continue;  // every key after every query: masked whole
        fn(b * 2 * c + kq * c, b * 2 * c + kk * c, qc * c, kc * c);  // local rows; global positions
        ++n;
      }
    return n;
  }

  static Index forward_block(const CpTokens& tok, const RingAttentionConfig& cfg, int src, const CMat& q, const CMat& kv,
                             CMat& o, CMat& m, CMat& l) {
    const Index c = tok.chunk(), d = cfg.head_dim, hq = cfg.heads, rep = hq / cfg.kv_heads(), kvw = cfg.kv_heads() * d;
    const C scale = C(1) / std::sqrt(C(d));
    Index blocks = 0;
    CMat s(c, c);
    for (Index b = 0; b < tok.batch; ++b)
      blocks += for_blocks(tok, src, b, [&](Index qi, Index ki, Index qp, Index kp) {
        const bool diag = qp == kp;
        for (Index h = 0; h < hq; ++h) {
          const Index gk = (h / rep) * d;
          s.noalias() = q.block(qi, h * d, c, d) * kv.block(ki, gk, c, d).transpose() * scale;
          for (Index i = 0; i < c; ++i) {
            const Index cols = diag ? i + 1 : c;  // causal within the diagonal block
            const C mb = s.row(i).head(cols).maxCoeff();
            const C mn = std::max(m(qi + i, h), mb);
            const C keep = std::exp(m(qi + i, h) - mn);  // 0 the first time (m = −∞)
            C sum = 0;
            auto orow = o.row(qi + i).segment(h * d, d);
            orow *= keep;
            for (Index j = 0; j < cols; ++j) {
              const C p = std::exp(s(i, j) - mn);
              sum += p;
              const C kept = cfg.drop.active() ? p * cfg.drop.template factor<C>(b, h, tok.seq, qp + i, kp + j) : p;
              orow += kept * kv.row(ki + j).segment(kvw + gk, d);
            }
            l(qi + i, h) = l(qi + i, h) * keep + sum;
            m(qi + i, h) = mn;
          }
        }
      });
    return blocks / std::max<Index>(tok.batch, 1);
  }

  static void backward_block(const CpTokens& tok, const RingAttentionConfig& cfg, int src, const CMat& q, const CMat& kv,
                             const CMat& lse, const CMat& dout, const CMat& dsum, CMat& dq, CMat& acc) {
    const Index c = tok.chunk(), d = cfg.head_dim, hq = cfg.heads, rep = hq / cfg.kv_heads(), kvw = cfg.kv_heads() * d;
    const C scale = C(1) / std::sqrt(C(d));
    CMat p(c, c), ds(c, c), f(cfg.drop.active() ? c : 0, cfg.drop.active() ? c : 0);
    for (Index b = 0; b < tok.batch; ++b)
      for_blocks(tok, src, b, [&](Index qi, Index ki, Index qp, Index kp) {
        const bool diag = qp == kp;
        for (Index h = 0; h < hq; ++h) {
          const Index gk = (h / rep) * d;
          const auto qb = q.block(qi, h * d, c, d);
          const auto kb = kv.block(ki, gk, c, d);
          const auto vb = kv.block(ki, kvw + gk, c, d);
          const auto dob = dout.block(qi, h * d, c, d);
          p.noalias() = qb * kb.transpose() * scale;
          for (Index i = 0; i < c; ++i)
            for (Index j = 0; j < c; ++j) p(i, j) = (diag && j > i) ? C(0) : std::exp(p(i, j) - lse(qi + i, h));
          ds.noalias() = dob * vb.transpose();  // d(P ⊙ F)
          if (cfg.drop.active()) {
            for (Index i = 0; i < c; ++i)
              for (Index j = 0; j < c; ++j) f(i, j) = cfg.drop.template factor<C>(b, h, tok.seq, qp + i, kp + j);
            acc.block(ki, kvw + gk, c, d).noalias() += p.cwiseProduct(f).transpose() * dob;  // dV
            ds = ds.cwiseProduct(f);                                                         // dP
          } else {
            acc.block(ki, kvw + gk, c, d).noalias() += p.transpose() * dob;  // dV
          }
          for (Index i = 0; i < c; ++i) ds.row(i) = (p.row(i).array() * (ds.row(i).array() - dsum(qi + i, h))).matrix();
          dq.block(qi, h * d, c, d).noalias() += ds * kb * scale;
          acc.block(ki, gk, c, d).noalias() += ds.transpose() * qb * scale;  // dK
        }
      });
  }
};

}  // namespace shardalg::nn
