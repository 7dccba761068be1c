// shardalg/nn/layers/ulysses_attention.hpp — causal attention over a context-parallel group by
// all-to-all (DeepSpeed-Ulysses): trade the sequence split for a head split, attend locally over
// the whole sequence, trade back.
//
//   Q|K|V[cp:Row over tokens, heads whole on cp]  ──all_to_all──▶  Q|K|V[cp:C over heads, tokens whole]
//   per local head: causal attention over the whole sequence (the ring's kernels on a group of one)
//   O[cp:C over heads]  ──all_to_all──▶  O[cp:Row over tokens]
//
//   backward: dO by the same all_to_all, the local attention's adjoint, dQ|dK|dV back by the
//   inverse all_to_all (an all_to_all's adjoint is the all_to_all the other way).
//   communication per rank: 2 all_to_alls forward (Q|K|V in one, O), 2 backward (dO, dQ|dK|dV),
//   each moving (cp − 1)/cp of its blocks; the ring moves the whole K/V cp − 1 times (α-β costs:
//   docs/layers/context_parallel.md).
//
// Needs the query heads and the key/value heads of this rank divisible by cp (each rank takes
// whole heads); the token order is cp_tokens.hpp's, the same as the ring's, so the two are
// interchangeable on the same activations.
#pragma once

#include <cstddef>
#include <vector>

#include "shardalg/comm/self.hpp"
#include "shardalg/nn/layers/ring_attention.hpp"

namespace shardalg::nn {

template <class T>
struct UlyssesAttention {
  using Mat = typename RingAttention<T>::Mat;
  struct Cache {
    Mat q, k, v;  // head-split, whole sequence (batch-major), for the backward
    typename RingAttention<T>::Forward local;
  };
  struct Forward {
    Mat o;  // [rows, Hq·d]: this rank's tokens, every head
    Cache cache;
  };
  using Grads = typename RingAttention<T>::Grads;  // dQ, dK, dV: this rank's rows, every head

  static void check(Group& g, const CpTokens& tok, const RingAttentionConfig& c, const Mat& q, const Mat& k, const Mat& v) {
    RingAttention<T>::check(c, tok, q, k, v);
    const int cp = g.size();
    if (c.heads % cp != 0 || c.kv_heads() % cp != 0)
      throw DivisibilityError(shardalg::detail::cat("all-to-all attention: ", c.heads, " query heads and ", c.kv_heads(),
                                          " key/value heads must each be divisible by cp ", cp, " (each rank takes whole heads)"));
  }

  static Forward forward(Group& g, const CpTokens& tok, const RingAttentionConfig& c, const Mat& q, const Mat& k, const Mat& v) {
    check(g, tok, c, q, k, v);
    const int cp = g.size();
    const Index d = c.head_dim, qw = c.heads / cp * d, kw = c.kv_heads() / cp * d;
    // Q|K|V to heads: destination j gets its heads' columns of Q, K and V for this rank's rows
    const Mat whole = exchange(g, tok, {{&q, qw}, {&k, kw}, {&v, kw}}, true);
    Forward f;
    f.cache.q = whole.leftCols(qw);
    f.cache.k = whole.middleCols(qw, kw);
    f.cache.v = whole.rightCols(kw);
    Group self(SelfComm{});
    const CpTokens all{tok.seq, tok.batch, 1, 0};
    f.cache.local = RingAttention<T>::forward(self, all, local_config(g, c), f.cache.q, f.cache.k, f.cache.v);
    f.o = exchange(g, tok, {{&f.cache.local.o, qw}}, false);
    return f;
  }

  static Grads backward(Group& g, const CpTokens& tok, const RingAttentionConfig& c, const Forward& f, const Mat& dout) {
    const int cp = g.size();
    const Index d = c.head_dim, qw = c.heads / cp * d, kw = c.kv_heads() / cp * d;
    const Mat dwhole = exchange(g, tok, {{&dout, qw}}, true);
    Group self(SelfComm{});
    const CpTokens all{tok.seq, tok.batch, 1, 0};
    const auto gl = RingAttention<T>::backward(self, all, local_config(g, c), f.cache.q, f.cache.k, f.cache.v, f.cache.local, dwhole);
    Mat cat(gl.dq.rows(), qw + 2 * kw);
    cat << gl.dq, gl.dk, gl.dv;
    const Mat back = exchange(g, tok, {{&cat, qw + 2 * kw}}, false);
    // back holds, per part, cp blocks of columns: [dQ heads of rank 0 | dK | dV] [… of rank 1] …
    Grads gr{Mat(tok.rows(), cp * qw), Mat(tok.rows(), cp * kw), Mat(tok.rows(), cp * kw)};
    for (int j = 0; j < cp; ++j) {
      const Index at = j * (qw + 2 * kw);
      gr.dq.middleCols(j * qw, qw) = back.middleCols(at, qw);
      gr.dk.middleCols(j * kw, kw) = back.middleCols(at + qw, kw);
      gr.dv.middleCols(j * kw, kw) = back.middleCols(at + qw + kw, kw);
    }
    return gr;
  }

 private:
  /// The local attention's config: this rank's share of the heads (the dropout mask's head offset
  /// moves with it), the whole sequence.
  static RingAttentionConfig local_config(const Group& g, const RingAttentionConfig& c) {
    RingAttentionConfig l{c.heads / g.size(), c.kv_heads() / g.size(), c.head_dim, true, c.drop};
    l.drop.head0 += g.rank() * l.heads;
    return l;
  }
  struct Part {
    const Mat* m;
    Index width;  // columns per head group
  };

  /// to_heads: this rank's rows → rank j gets column group j of each part; returns the whole
  /// sequence (batch-major rows) × [parts' groups for this rank side by side].
  /// !to_heads: the whole sequence × parts (this rank's head group) → rank j gets its rows;
  /// returns this rank's rows × [for each source rank s: its parts] — for one part of width w,
  /// that is the head groups in rank order, i.e. every head.
  static Mat exchange(Group& g, const CpTokens& tok, std::vector<Part> parts, bool to_heads) {
    const int cp = g.size();
    const Index rows = tok.rows(), n = tok.batch * tok.seq;
    Index w = 0;
    for (const auto& p : parts) w += p.width;
    const std::size_t block = static_cast<std::size_t>(rows * w);  // every block: one rank's rows × w
    std::vector<T> send(block * static_cast<std::size_t>(cp)), recv(send.size());
    for (int j = 0; j < cp; ++j) {
      const CpTokens dst{tok.seq, tok.batch, cp, j};
      T* out = send.data() + block * static_cast<std::size_t>(j);
      for (Index i = 0; i < rows; ++i) {
        Index col = 0;
        for (const auto& p : parts) {
          // to_heads: my row i, group j's columns; back: the row of rank j's i-th token, my columns
          const auto src = to_heads ? p.m->row(i).segment(j * p.width, p.width) : p.m->row(dst.global_row(i)).segment(0, p.width);
          for (Index c = 0; c < p.width; ++c) out[i * w + col + c] = src(c);
          col += p.width;
        }
      }
    }
    g.all_to_all(send.data(), recv.data(), block, dtype_of<T>);
    Mat r = to_heads ? Mat(n, w) : Mat(rows, w * cp);
    for (int s = 0; s < cp; ++s) {
      const CpTokens from{tok.seq, tok.batch, cp, s};
      const T* in = recv.data() + block * static_cast<std::size_t>(s);
      for (Index i = 0; i < rows; ++i)
        for (Index c = 0; c < w; ++c) {
          if (to_heads) r(from.global_row(i), c) = in[i * w + c];
          else r(i, s * w + c) = in[i * w + c];
        }
    }
    return r;
  }
};

}  // namespace shardalg::nn
