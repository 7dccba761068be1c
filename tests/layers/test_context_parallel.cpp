// Context parallelism: ring attention (nn/layers/ring_attention.hpp) on thread ranks against causal
// attention written out whole, at cp = 1, 2, 3, 4 with grouped K/V; the causal balance; the ring's
// messages in the ledger; the errors; and the transformer block on a cp × tp mesh against the dense
// block (reference/dense_layers.hpp), every gradient.
#include <doctest/doctest.h>

#include "cases.hpp"
#include "cp_cases.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/mesh/mesh.hpp"
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

namespace {

/// The transformer block on a cp × tp mesh (attention over cp by `algo`) against the dense block on
/// the whole batch: Y and dX on this rank's rows; every parameter gradient summed over cp (each
/// cp rank's is the summand of its tokens: G[cp:Partial]) against the dense gradient.
template <class T>
std::vector<std::pair<std::string, double>> block_cp_errors(ThreadComm& c, int cp, int tp, const lt::BlockCase& bc, nn::CpAlgo algo) {
  using lt::M;
  constexpr Index S = 8, Bt = 2;
  Group world(c);
  Mesh mesh(world, {{"cp", cp}, {"tp", tp}});
  const Group& tg = mesh.group("tp");
  Group cg = mesh.group("cp");
  auto rb = lt::make_ref_block(bc, [](Index r, Index cc, std::uint64_t sd, double sc) { return lt::rnd<T>(r, cc, sd, sc); });
  rb.attn.seq = S;
  auto cfg = lt::block_config(bc);
  cfg.seq = S;
  auto blk = nn::TransformerBlock<T>::from_dense(cfg, lt::block_masters(bc, rb), tg);
  blk.set_context_parallel(cg, algo);  // attention over cp, the dropout masks at the chunks' rows
  const nn::CpTokens tok{S, Bt, cp, cg.rank()};
  const M x = lt::rnd<T>(Bt * S, lt::kHidden, 201), dy = lt::rnd<T>(Bt * S, lt::kHidden, 202);
  const auto f = blk.forward(lt::shard_as<Replicated, T, CpuBackend>(lt::M(tok.take(x)), tg));
  const auto gr = blk.backward(f.cache, lt::shard_as<Replicated, T, CpuBackend>(lt::M(tok.take(dy)), tg));
  const auto ro = ref::block_forward(rb, x);
  const auto rg = ref::block_backward(rb, x, ro, dy);
  std::vector<std::pair<std::string, double>> out;
  auto rel = [](const M& a, const M& b) { return (a - b).norm() / b.norm(); };
  auto local = [&](const std::string& n, const auto& got, const M& want) {
    out.emplace_back(n, rel(to_dense(got).template cast<double>(), tok.take(want)));
  };
  auto summed = [&](const std::string& n, const auto& got, const M& want) {  // all_reduce over cp, then against the dense
    M d = to_dense(got).template cast<double>();
    cg.all_reduce(d.data(), static_cast<std::size_t>(d.size()));
    out.emplace_back(n, rel(d, want));
  };
  local("y", f.y, ro.y);
  local("dx", gr.dx, rg.dx);
  const Index hd = lt::kHidden / lt::kHeads;
  summed("ln1.dgamma", gr.params.ln1.dgamma, rg.ln1.dgamma);
  summed("ln2.dgamma", gr.params.ln2.dgamma, rg.ln2.dgamma);
  summed("attn.dwqkv", gr.params.attn.qkv.dw, ref::qkv_physical(rg.attn.dwq, rg.attn.dwk, rg.attn.dwv, lt::kHeads, bc.groups, hd, tp));
  summed("attn.dwo", gr.params.attn.proj.dw, rg.attn.dwo);
  summed("mlp.dw2", gr.params.mlp.fc2.dw, rg.mlp.dw2);
  if (bc.bias) {
    summed("attn.dbqkv", *gr.params.attn.qkv.db, ref::qkv_physical(rg.attn.dbq, rg.attn.dbk, rg.attn.dbv, lt::kHeads, bc.groups, hd, tp));
    summed("mlp.db1", *gr.params.mlp.fc1.db, bc.act == nn::Activation::swiglu ? ref::swiglu_physical(rg.mlp.db1, rg.mlp.dbu, tp) : rg.mlp.db1);
  }
  summed("mlp.dw1", gr.params.mlp.fc1.dw, bc.act == nn::Activation::swiglu ? ref::swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, tp) : rg.mlp.dw1);
  return out;
}

}  // namespace

TEST_CASE("the transformer block with context parallelism equals the dense block: cp 1, 2, 4 × tp 1, 2, ring and all-to-all, ± dropout, every gradient") {
  const lt::BlockCase mha{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.0};
  const lt::BlockCase gqa{nn::NormKind::rms, nn::Activation::swiglu, false, 2, 0.0};
  // hidden dropout 0.1 and attention dropout 0.2: the masks at the chunks' global rows and positions
  const lt::BlockCase dropped{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.1, 0.2};
  const lt::BlockCase dropped_gqa{nn::NormKind::rms, nn::Activation::swiglu, false, 2, 0.1, 0.2};
  struct Run {
    int cp, tp;
    lt::BlockCase bc;
    nn::CpAlgo algo;
  };
  const std::vector<Run> runs{{1, 1, mha, nn::CpAlgo::ring},       {2, 1, mha, nn::CpAlgo::ring},  {4, 1, gqa, nn::CpAlgo::ring},
                              {2, 2, mha, nn::CpAlgo::ring},       {2, 2, gqa, nn::CpAlgo::ring},  {4, 2, mha, nn::CpAlgo::ring},
                              {2, 2, mha, nn::CpAlgo::all_to_all}, {4, 1, mha, nn::CpAlgo::all_to_all},
                              {2, 2, dropped, nn::CpAlgo::ring},   {4, 1, dropped_gqa, nn::CpAlgo::ring},
                              {2, 2, dropped, nn::CpAlgo::all_to_all}};
  for (const auto& r : runs) {
    CAPTURE(r.cp);
    CAPTURE(r.tp);
    CAPTURE(r.bc.groups);
    CAPTURE(int(r.algo));
    run_ranks(r.cp * r.tp, [&](ThreadComm& c) {
      for (const auto& e : block_cp_errors<double>(c, r.cp, r.tp, r.bc, r.algo)) CHECK_MESSAGE(e.second < 1e-12, e.first << ": " << e.second);
    });
  }
  run_ranks(2, [&](ThreadComm& c) {  // float, its tolerance
    for (const auto& e : block_cp_errors<float>(c, 2, 1, mha, nn::CpAlgo::ring)) CHECK_MESSAGE(e.second < 1e-5, e.first << ": " << e.second);
  });
}

TEST_CASE("context parallelism refuses what it cannot split: the sequence, rows that are not whole chunks") {
  run_ranks(2, [](ThreadComm& c) {
    Group g(c);
    lt::BlockCase bc{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.0};
    auto rb = lt::make_ref_block(bc, [](Index r, Index cc, std::uint64_t sd, double sc) { return lt::rnd<double>(r, cc, sd, sc); });
    auto cfg = lt::block_config(bc);  // seq 6: not 4 chunks of a whole number of positions
    auto blk = nn::TransformerBlock<double>::from_dense(cfg, lt::block_masters(bc, rb), Group(SelfComm{}));
    CHECK_THROWS_WITH_AS(blk.attention().set_context_parallel(g),
                         "context parallelism: sequence length 6 is not divisible by 2·cp = 4 (two chunks per rank, for the causal balance)",
                         DivisibilityError);
    cfg.seq = 8;
    rb.attn.seq = 8;
    auto ok = nn::TransformerBlock<double>::from_dense(cfg, lt::block_masters(bc, rb), Group(SelfComm{}));
    ok.attention().set_context_parallel(g);
    const lt::M x = lt::rnd<double>(6, lt::kHidden, 1);
    CHECK_THROWS_WITH_AS(ok.forward(lt::shard_as<Replicated, double, CpuBackend>(x, Group(SelfComm{}))),
                         "Attention: 6 rows are not a whole number of sequences' chunks: 4 rows per sequence on each of 2 context-parallel ranks (sequence length 8)",
                         ShapeError);
  });
}
