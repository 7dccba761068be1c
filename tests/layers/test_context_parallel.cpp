// Context parallelism: ring attention (nn/layers/ring_attention.hpp) on thread ranks against causal
// attention written out whole, at cp = 1, 2, 3, 4 with grouped K/V; the causal balance; the ring's
// messages in the ledger; the errors; all-to-all attention against both. The transformer block on a
// cp × tp mesh is test_context_parallel_block.cpp.
#include <doctest/doctest.h>

#include "cp_cases.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/observe/ledger.hpp"

using namespace shardalg;
using cpt::Shape;

TEST_CASE("ring attention equals causal attention on the whole sequence, forward and backward (cp 1–4, GQA, float and double)") {
  for (int cp : {1, 2, 3, 4})
    for (const Shape s : {Shape{2, 4 * cp, 4, 2, 3}, Shape{1, 6 * cp, 2, 2, 4}, Shape{3, 2 * cp, 3, 1, 2}}) {
      CAPTURE(cp);
      CAPTURE(s.seq);
      run_ranks(cp, [&](ThreadComm& c) {
        Group g(c);
        const auto r = cpt::ring_case<double>(g, s, true);
        CHECK(r.o < 1e-13);
        CHECK(r.lse < 1e-13);
        CHECK(r.dq < 1e-12);
        CHECK(r.dk < 1e-12);
        CHECK(r.dv < 1e-12);
        const auto f = cpt::ring_case<float>(g, s, true);
        CHECK(f.o < 1e-5);
        CHECK(f.dq < 1e-4);
        CHECK(f.dk < 1e-4);
        CHECK(f.dv < 1e-5);
      });
    }
}

TEST_CASE("ring attention: blocking and overlapped receives give the same bits; every rank computes 2·cp + 1 chunk blocks") {
  for (int cp : {2, 3, 4, 8}) {
    CAPTURE(cp);
    run_ranks(cp, [&](ThreadComm& c) {
      Group g(c);
      using RA = nn::RingAttention<double>;
      const Shape s{2, 4 * cp, 2, 2, 3};
      const nn::CpTokens tok{s.seq, s.batch, cp, c.rank()};
      const Index n = s.batch * s.seq;
      const auto q = tok.take(cpt::random(n, 6, 1)), k = tok.take(cpt::random(n, 6, 2)), v = tok.take(cpt::random(n, 6, 3));
      const auto dout = tok.take(cpt::random(n, 6, 4));
      const auto a = RA::forward(g, tok, {2, 2, 3, true}, q, k, v);
      const auto b = RA::forward(g, tok, {2, 2, 3, false}, q, k, v);
      CHECK(a.o == b.o);
      CHECK(a.lse == b.lse);
      CHECK(RA::backward(g, tok, {2, 2, 3, true}, q, k, v, a, dout).dk == RA::backward(g, tok, {2, 2, 3, false}, q, k, v, b, dout).dk);
      // chunks r and 2cp−1−r see r + 1 and 2cp − r key chunks: the same on every rank
      CHECK(a.blocks == 2 * cp + 1);
    });
  }
}

TEST_CASE("ring attention: the ledger holds cp − 1 K|V sends forward, cp − 1 K|V and cp dK|dV sends backward, with their bytes") {
  for (int cp : {1, 2, 4}) {
    CAPTURE(cp);
    run_ranks(cp, [&](ThreadComm& c) {
      Ledger lf, lb;
      using RA = nn::RingAttention<double>;
      const Shape s{2, 4 * cp, 4, 2, 3};
      const nn::CpTokens tok{s.seq, s.batch, cp, c.rank()};
      const Index n = s.batch * s.seq, rows = tok.rows();
      const auto q = tok.take(cpt::random(n, 12, 1)), k = tok.take(cpt::random(n, 6, 2)), v = tok.take(cpt::random(n, 6, 3));
      Group gf = ledgered(c, lf), gb = ledgered(c, lb);
      const auto f = RA::forward(gf, tok, {4, 2, 3, true}, q, k, v);
      (void)RA::backward(gb, tok, {4, 2, 3, true}, q, k, v, f, q);
      const std::size_t block = static_cast<std::size_t>(rows * 2 * 2 * 3) * sizeof(double);  // K|V: rows × 2·G·d
      CHECK(lf.count(CollectiveKind::send) == static_cast<std::size_t>(cp - 1));
      CHECK(lf.count(CollectiveKind::recv) == static_cast<std::size_t>(cp - 1));
      const std::size_t back = cp == 1 ? 0 : static_cast<std::size_t>(2 * cp - 1);  // one rank: no ring, no message
      CHECK(lb.count(CollectiveKind::send) == back);
      CHECK(lb.count(CollectiveKind::recv) == back);
      std::size_t bytes = 0;
      for (const auto& e : lb.entries())
        if (e.kind == CollectiveKind::send) bytes += e.bytes;
      CHECK(bytes == back * block);  // K|V and dK|dV are the same size
    });
  }
}

TEST_CASE("ring attention: a sequence that does not split into 2·cp chunks, or Q/K/V of other shapes, are refused by name") {
  run_ranks(2, [](ThreadComm& c) {
    Group g(c);
    using RA = nn::RingAttention<double>;
    const nn::CpTokens bad{10, 1, 2, c.rank()};
    const RA::Mat m(5, 4);
    CHECK_THROWS_WITH_AS(RA::forward(g, bad, {2, 2, 2, true}, m, m, m),
                         "context parallelism: sequence length 10 is not divisible by 2·cp = 4 (two chunks per rank, for the causal balance)",
                         DivisibilityError);
    const nn::CpTokens tok{8, 1, 2, c.rank()};
    CHECK_THROWS_WITH_AS(RA::forward(g, tok, {2, 2, 2, true}, m, m, m),
                         "ring attention: Q 5×4, K 5×4, V 5×4 do not fit 4 rows of 2 query and 2 key/value heads of 2", ShapeError);
    CHECK_THROWS_WITH_AS(RA::forward(g, tok, {3, 2, 2, true}, m, m, m), "ring attention: 3 query heads are not a multiple of 2 key/value heads",
                         DivisibilityError);
  });
}

TEST_CASE("all-to-all attention equals the ring and causal attention on the whole sequence (cp 1, 2, 4; GQA); 2 all_to_alls each way") {
  for (int cp : {1, 2, 4})
    for (const Shape s : {Shape{2, 4 * cp, 4, 4, 3}, Shape{1, 2 * cp, 8, 4, 2}}) {
      CAPTURE(cp);
      CAPTURE(s.heads);
      run_ranks(cp, [&](ThreadComm& c) {
        Group g(c);
        const auto r = cpt::ulysses_case<double>(g, s);
        CHECK(r.r.o < 1e-13);
        CHECK(r.r.dq < 1e-12);
        CHECK(r.r.dk < 1e-12);
        CHECK(r.r.dv < 1e-12);
        CHECK(r.vs_ring < 1e-12);
        Ledger l;
        Group gl = ledgered(c, l);
        using UA = nn::UlyssesAttention<double>;
        const nn::CpTokens tok{s.seq, s.batch, cp, c.rank()};
        const auto q = tok.take(cpt::random(s.batch * s.seq, s.heads * s.d, 1));
        const auto kv = tok.take(cpt::random(s.batch * s.seq, s.groups * s.d, 2));
        const nn::RingAttentionConfig cfg{s.heads, s.groups, s.d, true};
        const auto f = UA::forward(gl, tok, cfg, q, kv, kv);
        CHECK(l.count(CollectiveKind::all_to_all) == 2u);
        (void)UA::backward(gl, tok, cfg, f, q);
        CHECK(l.count(CollectiveKind::all_to_all) == 4u);
      });
    }
  run_ranks(2, [](ThreadComm& c) {
    Group g(c);
    const nn::CpTokens tok{8, 1, 2, c.rank()};
    const nn::UlyssesAttention<double>::Mat q(4, 6), kv(4, 2);
    CHECK_THROWS_WITH_AS(nn::UlyssesAttention<double>::forward(g, tok, {3, 1, 2, true}, q, kv, kv),
                         "all-to-all attention: 3 query heads and 1 key/value heads must each be divisible by cp 2 (each rank takes whole heads)",
                         DivisibilityError);
  });
}
