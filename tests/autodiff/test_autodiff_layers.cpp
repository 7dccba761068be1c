// The layers twice: the Megatron MLP, attention (MHA and GQA) and the transformer block
// written with the differentiable ops (autodiff/layers.hpp, no backward written) against the
// hand-written nn layers on the same weights: the output and every gradient bit-identical (double;
// the worst normwise relative error is reported beside), at TP 1, 2, 4 and on a
// DP × TP = 2 × 2 mesh; and the ledgers: the derived backward issues exactly the hand-written
// layers' collectives (1 all_reduce forward and 1 backward per sub-layer; under sequence
// parallelism the all_gather / reduce_scatter pairs).
#include <doctest/doctest.h>

#include <mutex>
#include <string>
#include <vector>

#include <shardalg/autodiff/layers.hpp>
#include <shardalg/nn/layers/block.hpp>
#include <shardalg/nn/layers/sp_block.hpp>

#include "testing.hpp"

using namespace shardalg;
using M = CpuBackend::matrix<double>;

namespace {

M rnd(Index r, Index c, std::uint64_t seed) { return testing::random_real<double>(r, c, seed); }

/// Tallies of one comparison run: every tensor must match bit for bit; the worst normwise relative
/// error is kept for the report.
struct Tally {
  double worst = 0;
  int tensors = 0, identical = 0;
  std::mutex m;
  template <class LA, class LB>
  /// `bitwise` false: the two sum in different orders (documented where called), so the check is
  /// normwise ≤ 1e-15 relative instead.
  void compare(const Sharded<double, LA>& derived, const Sharded<double, LB>& written, const std::string& what,
               bool bitwise = true) {
    const M a = to_dense(derived), b = to_dense(written);
    if (derived.group().rank() != 0) return;
    std::lock_guard lk(m);
    REQUIRE_MESSAGE(a.rows() == b.rows(), what);
    REQUIRE_MESSAGE(a.cols() == b.cols(), what);
    const double scale = b.norm();
    const double e = scale > 0 ? (a - b).norm() / scale : (a - b).norm();
    if (bitwise) CHECK_MESSAGE(a == b, what, " differs: relative error ", e);
    else CHECK_MESSAGE(e <= 1e-15, what, " relative error ", e);
    worst = std::max(worst, e);
    ++tensors;
    identical += a == b;
  }
};

/// The same block relabelled: the hand-written layers' R parameters after g are the derived
/// layers' I (a parameter updated redundantly, whose gradient every rank computes whole).
template <class L>
Sharded<double, L> as(const Sharded<double, Replicated>& x) {
  return Sharded<double, L>(x.local(), x.rows(), x.cols(), x.group());
}

/// The derived layers' parameters, on `t`, from a hand-written block (the same local blocks).
template <class LB, class Blk>
ad::BlockParams<double, LB> params_of(ad::Tape& t, const Blk& b, double eps) {
  auto col = [&](const auto& l) {
    ad::ColumnParams<double> p{t.input(l.weight()), std::nullopt};
    if (l.bias()) p.b = t.input(*l.bias());
    return p;
  };
  auto row = [&](const auto& l) {
    ad::RowParams<double, LB> p{t.input(l.weight()), std::nullopt};
    if (l.bias()) p.b = t.input(as<LB>(*l.bias()));
    return p;
  };
  auto norm = [&](const auto& n) {
    ad::NormParams<double, LB> p{t.input(as<LB>(n.gamma())), std::nullopt, eps};
    if (n.beta()) p.beta = t.input(as<LB>(*n.beta()));
    return p;
  };
  return {norm(b.ln1()), col(b.attention().qkv()), row(b.attention().proj()), norm(b.ln2()), col(b.mlp().fc1()),
          row(b.mlp().fc2())};
}

/// Dense masters of a block (logical layouts), random.
struct Masters {
  M ln1g, ln1b, wq, bq, wk, bk, wv, bv, wo, bo, ln2g, ln2b, w1, b1, wu, bu, w2, b2;
  Masters(const nn::BlockConfig& c, std::uint64_t s) {
    const Index h = c.hidden, d = h / c.heads, kd = (c.groups ? c.groups : c.heads) * d, f = c.ffn;
    ln1g = rnd(1, h, s + 1), ln1b = rnd(1, h, s + 2), ln2g = rnd(1, h, s + 3), ln2b = rnd(1, h, s + 4);
    wq = rnd(h, h, s + 5), bq = rnd(1, h, s + 6), wk = rnd(h, kd, s + 7), bk = rnd(1, kd, s + 8);
    wv = rnd(h, kd, s + 9), bv = rnd(1, kd, s + 10), wo = rnd(h, h, s + 11), bo = rnd(1, h, s + 12);
    w1 = rnd(h, f, s + 13), b1 = rnd(1, f, s + 14), wu = rnd(h, f, s + 15), bu = rnd(1, f, s + 16);
    w2 = rnd(f, h, s + 17), b2 = rnd(1, h, s + 18);
  }
  nn::BlockMasters<M> view(const nn::BlockConfig& c) const {
    const bool lnb = c.norm == nn::NormKind::layer, glu = c.act == nn::Activation::swiglu, bias = c.bias;
    auto bp = [&](const M& m) { return bias ? &m : nullptr; };
    return {&ln1g, lnb ? &ln1b : nullptr, {&wq, bp(bq), &wk, bp(bk), &wv, bp(bv), &wo, bp(bo)},
            &ln2g, lnb ? &ln2b : nullptr, {&w1, bp(b1), glu ? &wu : nullptr, glu ? bp(bu) : nullptr, &w2, bp(b2)}};
  }
};

nn::BlockConfig config(nn::Activation act, nn::NormKind norm, Index groups, bool bias, double dropout) {
  nn::BlockConfig c;
  c.hidden = 16, c.heads = 4, c.groups = groups, c.seq = 4, c.ffn = 32, c.act = act, c.norm = norm, c.bias = bias;
  c.eps = 1.0 / 1024, c.dropout = dropout, c.dropout_seed = 99, c.layer = 3;
  return c;
}
nn::Dropout drop_of(const nn::BlockConfig& c, nn::TensorKind k, Index row_base) {
  nn::Dropout d(c.dropout, c.dropout_seed, nn::tensor_id(c.layer, k));
  d.row_base = row_base;
  return d;
}

/// One rank: the hand-written block and the derived one on the same input rows X (this rank's
/// replica's) and the same output cotangent; every gradient compared; the ledger entries of both
/// passes (kind and elements), to be compared by the caller.
struct Ledgers {
  std::vector<std::pair<CollectiveKind, std::size_t>> written, derived;
};
Ledgers compare_block(const nn::BlockConfig& c, const Masters& ms, const M& X, const M& DY, Group tp, Index row_base,
                      Tally& tally, const Group* dp = nullptr) {
  Ledgers out;
  auto entries = [](const Ledger& l) {
    std::vector<std::pair<CollectiveKind, std::size_t>> v;
    for (const auto& e : l.entries()) v.emplace_back(e.kind, e.elements);
    return v;
  };
  // Hand-written.
  Ledger lw;
  Group gw = ledgered(tp, lw);
  auto blk = nn::TransformerBlock<double>::from_dense(c, ms.view(c), gw);
  blk.set_dropout_row_base(row_base);
  auto fw = blk.forward(shard<Replicated>(X, gw));
  auto bw = blk.backward(fw.cache, shard<Replicated>(DY, gw));
  out.written = entries(lw);
  // Derived.
  Ledger ld;
  Group gd = ledgered(tp, ld);
  auto blk_d = nn::TransformerBlock<double>::from_dense(c, ms.view(c), gd);  // the same weights, on gd
  ad::Tape t;
  const auto p = params_of<Invariant>(t, blk_d, c.eps);
  auto x = t.input(shard<Invariant>(X, gd));
  auto y = ad::block(x, p, c, drop_of(c, nn::TensorKind::dropout_attn, row_base), drop_of(c, nn::TensorKind::dropout_mlp, row_base));
  t.backward(y, shard<Invariant>(DY, gd));
  out.derived = entries(ld);
  // Compared: the output, dX, and every parameter gradient (after the dp all_reduce when on a mesh).
  auto reduce = [&](auto g) {
    if (!dp) return g;
    using S = decltype(g);
    // this tp rank's block, summed over the dp replicas: G[dp:Partial, tp:L] → all_reduce<dp>
    auto r = all_reduce(Sharded<double, Partial>(g.local(), g.local_rows(), g.local_cols(), *dp));
    return S(std::move(r).local(), g.rows(), g.cols(), g.group());
  };
  tally.compare(y.value(), fw.y, "y");
  tally.compare(t.grad(x), bw.dx, "dx");
  const auto& gp = bw.params;
  tally.compare(reduce(t.grad(p.ln1.gamma)), reduce(gp.ln1.dgamma), "ln1.dgamma");
  if (p.ln1.beta) tally.compare(reduce(t.grad(*p.ln1.beta)), reduce(*gp.ln1.dbeta), "ln1.dbeta");
  tally.compare(reduce(t.grad(p.qkv.w)), reduce(gp.attn.qkv.dw), "attn.dWqkv");
  if (p.qkv.b) tally.compare(reduce(t.grad(*p.qkv.b)), reduce(*gp.attn.qkv.db), "attn.dbqkv");
  tally.compare(reduce(t.grad(p.proj.w)), reduce(gp.attn.proj.dw), "attn.dWo");
  if (p.proj.b) tally.compare(reduce(t.grad(*p.proj.b)), reduce(*gp.attn.proj.db), "attn.dbo");
  tally.compare(reduce(t.grad(p.ln2.gamma)), reduce(gp.ln2.dgamma), "ln2.dgamma");
  if (p.ln2.beta) tally.compare(reduce(t.grad(*p.ln2.beta)), reduce(*gp.ln2.dbeta), "ln2.dbeta");
  tally.compare(reduce(t.grad(p.fc1.w)), reduce(gp.mlp.fc1.dw), "mlp.dW1");
  if (p.fc1.b) tally.compare(reduce(t.grad(*p.fc1.b)), reduce(*gp.mlp.fc1.db), "mlp.db1");
  tally.compare(reduce(t.grad(p.fc2.w)), reduce(gp.mlp.fc2.dw), "mlp.dW2");
  if (p.fc2.b) tally.compare(reduce(t.grad(*p.fc2.b)), reduce(*gp.mlp.fc2.db), "mlp.db2");
  return out;
}

}  // namespace

TEST_CASE("autodiff layers: the derived block equals nn::TransformerBlock at TP 1, 2, 4 (GeLU/SwiGLU, LN/RMS, MHA/GQA, "
          "dropout), and communicates the same") {
  struct Variant {
    nn::Activation act;
    nn::NormKind norm;
    Index groups;
    bool bias;
    double dropout;
  };
  const Variant variants[] = {{nn::Activation::gelu_tanh, nn::NormKind::layer, 0, true, 0.0},
                              {nn::Activation::gelu_tanh, nn::NormKind::layer, 0, true, 0.2},
                              {nn::Activation::swiglu, nn::NormKind::rms, 4, false, 0.1},
                              {nn::Activation::gelu_erf, nn::NormKind::layer, 4, true, 0.0}};
  Tally tally;
  for (const auto& v : variants)
    for (int p : {1, 2, 4}) {
      CAPTURE(p);
      CAPTURE(static_cast<int>(v.act));
      const auto c = config(v.act, v.norm, v.groups, v.bias, v.dropout);
      const Masters ms(c, 1000 + static_cast<std::uint64_t>(p));
      const M X = rnd(8, c.hidden, 7), DY = rnd(8, c.hidden, 8);
      std::vector<Ledgers> ledgers(static_cast<std::size_t>(p));
      run_ranks(p, [&](ThreadComm& comm) {
        ledgers[static_cast<std::size_t>(comm.rank())] = compare_block(c, ms, X, DY, Group(comm), 0, tally);
      });
      // The derived backward's collectives are the hand-written's: kind and size, in order
      // (forward: g of attention and MLP; backward: f's adjoint of MLP and attention).
      for (const auto& l : ledgers) {
        CHECK(l.derived == l.written);
        CHECK(l.written.size() == (p > 1 ? 4u : 4u));
      }
    }
  MESSAGE("derived vs hand-written block: ", tally.tensors, " tensors, worst relative error ", tally.worst, ", ",
          tally.identical, " bit-identical");
  CHECK(tally.tensors > 100);
}

TEST_CASE("autodiff layers: on a DP x TP = 2 x 2 mesh, each replica's derived block equals the hand-written one, "
          "and so do the gradients all-reduced over dp") {
  const auto c = config(nn::Activation::gelu_tanh, nn::NormKind::layer, 0, true, 0.2);
  const Masters ms(c, 77);
  const M X = rnd(8, c.hidden, 17), DY = rnd(8, c.hidden, 18);
  Tally tally;
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh mesh(Group(comm), {{"dp", 2}, {"tp", 2}});
    const int d = mesh.coord("dp");
    const Index rows = X.rows() / 2, base = d * rows;  // replica d: its rows of the global batch
    const M x = X.middleRows(base, rows), dy = DY.middleRows(base, rows);
    const Group dpg = mesh.group("dp");
    compare_block(c, ms, x, dy, mesh.group("tp"), base, tally, &dpg);
  });
  MESSAGE("DP x TP 2 x 2: ", tally.tensors, " tensors, worst ", tally.worst, ", ", tally.identical, " bit-identical");
  CHECK(tally.tensors >= 28);
}

TEST_CASE("autodiff layers: the derived sequence-parallel block equals nn::SequenceParallelBlock; the same "
          "all_gather / reduce_scatter pairs; its norm and row-parallel bias gradients come out Partial") {
  for (bool bias : {false, true})
    for (int p : {2, 4}) {
      CAPTURE(p);
      CAPTURE(bias);
      const auto c = config(nn::Activation::gelu_tanh, nn::NormKind::layer, 0, bias, 0.1);
      const Masters ms(c, 500);
      const M X = rnd(8, c.hidden, 27), DY = rnd(8, c.hidden, 28);
      Tally tally;
      run_ranks(p, [&](ThreadComm& comm) {
        Ledger lw, ld;
        Group gw = ledgered(Group(comm), lw), gd = ledgered(Group(comm), ld);
        auto blk = nn::SequenceParallelBlock<double>::from_dense(c, ms.view(c), gw);
        auto fw = blk.forward(shard<RowSharded>(X, gw));
        auto bw = blk.backward(fw.cache, shard<RowSharded>(DY, gw));
        const std::size_t before_reduce = lw.entries().size();
        auto red = blk.reduce_grads(std::move(bw.params));  // the norms' Partial → R
        auto blk_d = nn::SequenceParallelBlock<double>::from_dense(c, ms.view(c), gd);
        ad::Tape t;
        const auto pr = params_of<Replicated>(t, blk_d, c.eps);
        auto x = t.input(shard<RowSharded>(X, gd));
        auto y = ad::sp_block(x, pr, c, drop_of(c, nn::TensorKind::dropout_attn, 0), drop_of(c, nn::TensorKind::dropout_mlp, 0));
        t.backward(y, shard<RowSharded>(DY, gd));
        // The typed gradients: R parameters on per-rank rows have Partial gradients.
        static_assert(std::is_same_v<decltype(t.grad(pr.ln1.gamma)), Sharded<double, Partial>>);
        tally.compare(y.value(), fw.y, "y");
        tally.compare(t.grad(x), bw.dx, "dx");
        tally.compare(t.grad(pr.ln1.gamma), red.ln1.dgamma, "ln1.dgamma (Partial vs reduced)");
        tally.compare(t.grad(*pr.ln2.beta), *red.ln2.dbeta, "ln2.dbeta");
        tally.compare(t.grad(pr.qkv.w), red.attn.qkv.dw, "attn.dWqkv");
        tally.compare(t.grad(pr.fc2.w), red.mlp.fc2.dw, "mlp.dW2");
        // The derived db2 is Partial, summed per rank then all-reduced; the hand-written one is the
        // column sum of the gathered dZ: two summation orders.
        if (bias) tally.compare(t.grad(*pr.fc2.b), *red.mlp.fc2.db, "mlp.db2 (Partial vs from the gathered dZ)", false);
        // Ledger: the same all_gather / reduce_scatter pairs, in order, with the same sizes.
        std::vector<std::pair<CollectiveKind, std::size_t>> w, dd;
        for (std::size_t i = 0; i < before_reduce; ++i) w.emplace_back(lw.entries()[i].kind, lw.entries()[i].elements);
        for (const auto& e : ld.entries()) dd.emplace_back(e.kind, e.elements);
        CHECK(dd == w);
        CHECK(w.size() == 8);  // forward 2 AG + 2 RS, backward 2 AG + 2 RS
      });
      CHECK(tally.tensors >= 6);
    }
}

TEST_CASE("autodiff layers: GQA with replicated K/V copies (groups < TP) is refused by name") {
  const auto c = config(nn::Activation::gelu_tanh, nn::NormKind::layer, 1, true, 0.0);
  const Masters ms(c, 3);
  run_ranks(2, [&](ThreadComm& comm) {
    auto blk = nn::TransformerBlock<double>::from_dense(c, ms.view(c), Group(comm));
    ad::Tape t;
    const auto p = params_of<Invariant>(t, blk, c.eps);
    auto x = t.input(shard<Invariant>(rnd(8, c.hidden, 1), Group(comm)));
    CHECK_THROWS_WITH_AS(ad::block(x, p, c, drop_of(c, nn::TensorKind::dropout_attn, 0), drop_of(c, nn::TensorKind::dropout_mlp, 0)),
                         "ad::attention: 1 query groups on 2 ranks: K/V copies on several ranks are not a layout (use groups "
                         "a multiple of the tensor-parallel size, or nn::Attention)",
                         ShapeError);
  });
}
