// Every differentiable op (issue 15): its derived gradient against central finite differences at
// P = 1 (double) and the whole program against its dense twin at P = 2, 3, 4 (ad::verify: P = 1 is
// the dense twin), grouped into a few programs with several outputs each. Then the adjoint ledger:
// each redistribution's backward records exactly the collective of the table (docs/design.md §5a).
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include <shardalg/autodiff.hpp>
#include <shardalg/autodiff/verify.hpp>

#include "testing.hpp"

using namespace shardalg;
using Dense = ad::Named::mapped_type;

namespace {

Dense rnd(Index r, Index c, std::uint64_t seed) { return testing::random_real<double>(r, c, seed); }

/// Shapes divisible by 2, 3 and 4 in every sharded dimension.
constexpr Index m = 12, k = 12, n = 24;

void check(const ad::VerifyReport& r) {
  INFO(r.text());
  CHECK(r.pass());
  CHECK(r.checks.size() > 3);  // the report is not empty
}

}  // namespace

TEST_CASE("autodiff: matmul in every form and transpose view, against finite differences and P = 2, 3, 4") {
  const ad::Named in{{"ar", rnd(m, k, 1)}, {"br", rnd(k, n, 2)}, {"arow", rnd(m, k, 3)}, {"bc", rnd(k, n, 4)},
                     {"ac", rnd(m, k, 5)}, {"brow", rnd(k, n, 6)}, {"ap", rnd(m, k, 7)}, {"bp", rnd(k, n, 8)},
                     {"ai", rnd(m, k, 9)}, {"bi", rnd(k, n, 10)}, {"atr", rnd(k, m, 11)}, {"btc", rnd(n, k, 12)},
                     {"br2", rnd(k, n, 13)}};
  // Every valid rule of §3 (nine), and transpose views on either side.
  auto valid = [](ad::Builder<double>& b) {
    auto ar = b.input<Replicated>("ar");
    auto br = b.input<Replicated>("br");
    auto arow = b.input<RowSharded>("arow");
    auto bc = b.input<ColSharded>("bc");
    auto ac = b.input<ColSharded>("ac");
    auto brow = b.input<RowSharded>("brow");
    auto ap = b.input<Partial>("ap");
    auto bp = b.input<Partial>("bp");
    auto ai = b.input<Invariant>("ai");
    auto bi = b.input<Invariant>("bi");
    auto atr = b.input<ColSharded>("atr");
    auto btc = b.input<RowSharded>("btc");
    auto brt = b.input<Replicated>("br2");
    b.output("R.R", ad::matmul(ar, br));
    b.output("R.Row", ad::matmul(ar, brow));
    b.output("R.C", ad::matmul(ar, bc));
    b.output("R.P", ad::matmul(ar, bp));
    b.output("Row.R", ad::matmul(arow, br));
    b.output("C.R", ad::matmul(ac, br));
    b.output("C.Row", ad::matmul(ac, brow));
    b.output("P.R", ad::matmul(ap, br));
    b.output("I.I", ad::matmul(ai, bi));
    b.output("At.R", ad::matmul(ad::transpose(atr), brt));
    b.output("R.Bt", ad::matmul(ar, ad::transpose(btc)));
  };
  check(ad::verify(valid, in, {.worlds = {2, 3, 4}}));
}

TEST_CASE("autodiff: + − α·, hadamard, add_bias, map (GeLUs, SiLU), SwiGLU, softmax, sums, dropout") {
  const ad::Named in{{"xr", rnd(m, n, 21)}, {"yr", rnd(m, n, 22)}, {"xrow", rnd(m, n, 23)}, {"yrow", rnd(m, n, 24)},
                     {"xc", rnd(m, n, 25)}, {"yc", rnd(m, n, 26)}, {"xp", rnd(m, n, 27)}, {"xi", rnd(m, n, 28)},
                     {"yi", rnd(m, n, 29)}, {"br", rnd(1, n, 30)}, {"bc", rnd(1, n, 31)}, {"bi", rnd(1, n, 32)}};
  auto program = [](ad::Builder<double>& b) {
    auto xr = b.input<Replicated>("xr");
    auto yr = b.input<Replicated>("yr");
    auto xrow = b.input<RowSharded>("xrow");
    auto yrow = b.input<RowSharded>("yrow");
    auto xc = b.input<ColSharded>("xc");
    auto yc = b.input<ColSharded>("yc");
    auto xp = b.input<Partial>("xp");
    auto xi = b.input<Invariant>("xi");
    auto yi = b.input<Invariant>("yi");
    auto br = b.input<Replicated>("br");
    auto bc = b.input<ColSharded>("bc");
    auto bi = b.input<Invariant>("bi");
    b.output("lin.R", 2.0 * xr - yr + xr);
    b.output("lin.Row", xrow - 0.5 * yrow);
    b.output("lin.P", xp + xp);
    b.output("had.C", ad::hadamard(xc, yc));
    b.output("had.PR", ad::hadamard(xp, yr));  // Partial ⊙ R → Partial
    b.output("had.I", ad::hadamard(xi, yi));
    b.output("bias.Row", ad::add_bias(xrow, br));
    b.output("bias.C", ad::add_bias(xc, bc));
    b.output("bias.I", ad::add_bias(xi, bi));
    b.output("gelu.R", ad::map(xr, ad::gelu));
    b.output("gelu_erf.C", ad::map(xc, ad::gelu_erf));
    b.output("silu.Row", ad::map(xrow, ad::silu));
    // SwiGLU on whole rows ([gate | up] of every row; on C each rank's block is its own gate and up
    // columns, a P-dependent physical layout, so the dense twin is P = 1's only for whole rows).
    b.output("swiglu.Row", ad::swiglu(yrow));
    b.output("softmax.Row", ad::softmax_rows(xrow));
    b.output("softmax.R", ad::softmax_rows(yr));
    b.output("softmax.I", ad::softmax_rows(yi));
    b.output("colsum.Row", ad::col_sum(yrow));  // Partial
    b.output("rowsum.C", ad::row_sum(yc));      // Partial
    b.output("sum.Row", ad::sum(xrow));
    b.output("sum.C.I", ad::sum<Invariant>(xc));
    b.output("sum.P", ad::sum(xp));
    b.output("sum.I", ad::sum(xi));
    b.output("drop.Row", ad::dropout(yrow, 0.3, 77, 5));
    b.output("drop.C", ad::dropout(xc, 0.3, 77, 6));
  };
  check(ad::verify(program, in, {.worlds = {2, 3, 4}}));
}

TEST_CASE("autodiff: every redistribution and conversion (f, g, all_gather, reduce_scatter, split, all_to_all, "
          "to_partial, redistribute<To>, matmul<To>)") {
  const ad::Named in{{"xi", rnd(m, n, 41)}, {"xr", rnd(m, n, 42)}, {"xp", rnd(m, n, 43)}, {"xrow", rnd(m, n, 44)},
                     {"xc", rnd(m, n, 45)}, {"h", rnd(m, n, 46)}, {"w", rnd(n, k, 47)}};
  auto program = [](ad::Builder<double>& b) {
    auto xi = b.input<Invariant>("xi");
    auto xr = b.input<Replicated>("xr");
    auto xp = b.input<Partial>("xp");
    auto xrow = b.input<RowSharded>("xrow");
    auto xc = b.input<ColSharded>("xc");
    b.output("f", ad::copy_to(xi));
    b.output("to_invariant", ad::to_invariant(xr));
    b.output("g", ad::all_reduce<Invariant>(xp));
    b.output("all_reduce", ad::all_reduce(xp));
    b.output("all_gather.Row", ad::all_gather(xrow));
    b.output("all_gather.C.I", ad::all_gather<Invariant>(xc));
    b.output("split.R.Row", ad::split<RowSharded>(xr));
    b.output("split.I.C", ad::split<ColSharded>(xi));
    b.output("reduce_scatter.C", ad::reduce_scatter<ColSharded>(xp));
    b.output("all_to_all.Row.C", ad::all_to_all<ColSharded>(xrow));
    b.output("to_partial.R", ad::to_partial(xr));
    b.output("to_partial.C", ad::to_partial(xc));
    b.output("to_partial.I", ad::to_partial(xi));
    b.output("redistribute.Row.R", ad::redistribute<Replicated>(xrow));
    b.output("redistribute.P.C", ad::redistribute<ColSharded>(xp));
    auto h = b.input<ColSharded>("h");
    auto w = b.input<RowSharded>("w");
    b.output("matmul<R>", ad::matmul<Replicated>(h, w));  // H[C]·W[Row] → Partial; all_reduce → R
    b.output("matmul<Row>", ad::matmul<RowSharded>(h, w));
  };
  check(ad::verify(program, in, {.worlds = {2, 3, 4}}));
}

TEST_CASE("autodiff: LayerNorm on I, R and Row, RMSNorm, causal attention, the vocab-parallel cross-entropy") {
  const Index T = 12, h = 24, heads = 12, d = h / heads, vocab = 36;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(T));
  for (Index i = 0; i < T; ++i) targets[static_cast<std::size_t>(i)] = (i * 7 + 3) % vocab;
  const ad::Named in{{"x", rnd(T, h, 61)}, {"g", rnd(1, h, 62)}, {"b", rnd(1, h, 63)}, {"qkv", rnd(T, 3 * h, 64)},
                     {"logits", rnd(T, vocab, 65)}, {"xr", rnd(T, h, 66)}, {"gr", rnd(1, h, 67)},
                     {"xrow", rnd(T, h, 68)}, {"grow", rnd(1, h, 69)}, {"brow", rnd(1, h, 70)}};
  auto program = [&](ad::Builder<double>& b) {
    const int p = b.group().size();
    auto xi = b.input<Invariant>("x");
    auto gi = b.input<Invariant>("g");
    auto bi = b.input<Invariant>("b");
    b.output("ln.I", ad::layer_norm(xi, gi, bi, 1e-5));
    auto xr = b.input<Replicated>("xr");
    auto gr = b.input<Replicated>("gr");
    b.output("rms.R", ad::rms_norm(xr, gr, 1e-5));  // γ[R]: its gradient is Partial (cot(R))
    auto xrow = b.input<RowSharded>("xrow");
    b.output("ln.Row", ad::layer_norm(xrow, b.input<Replicated>("grow"), b.input<Replicated>("brow"), 1e-5));
    // QKV[C]: each rank's columns are whole heads' q|k|v (units of one head here: MHA, a
    // [T, 3h] block of heads/P units of (q, k, v) of width d each).
    auto qkv = b.input<ColSharded>("qkv");
    const nn::AttnShape s{2, T / 2, heads / p, 1, d};
    b.output("attention", ad::causal_attention(qkv, s, h));
    nn::VocabParallelCrossEntropy<double> ce(vocab);
    b.output("ce", ad::cross_entropy(b.input<ColSharded>("logits"), targets, ce));
  };
  check(ad::verify(program, in, {.worlds = {2, 3, 4}}));
}

TEST_CASE("autodiff: the backward's collectives are the adjoints of the forward's (ledger, scope bwd)") {
  run_ranks(2, [](ThreadComm& comm) {
    const Dense a = rnd(4, 4, 81);
    // A direct listing: each forward, then its backward's entries in scope bwd.
    auto listing = [&](auto&& forward) {
      Ledger ledger;
      Group g = ledgered(Group(comm), ledger);
      ad::Tape tape;
      auto y = forward(tape, g);
      using Y = std::remove_cvref_t<decltype(y)>;
      using CL = ad::cot_t<typename Y::layout>;
      const auto [lr, lc] = local_shape(CL::kind, y.rows(), y.cols(), g.size(), g.rank());
      tape.backward(y, Sharded<double, CL>(CpuBackend::matrix<double>::Ones(lr, lc), y.rows(), y.cols(), g));
      std::vector<std::string> out;
      for (const auto& e : ledger.entries())
        if (Ledger::in_scope(e.scope, "bwd")) out.push_back(std::string(to_string(e.kind)) + " " + e.layout_in + " -> " + e.layout_out);
      return out;
    };
    using V = std::vector<std::string>;
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::copy_to(t.input(shard<Invariant>(a, g))); }) ==
          V{"all_reduce Partial -> I"});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::all_reduce<Invariant>(t.input(to_partial(shard<Replicated>(a, g)))); }) ==
          V{});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::to_invariant(t.input(shard<Replicated>(a, g))); }) == V{});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::all_reduce(t.input(to_partial(shard<Replicated>(a, g)))); }) ==
          V{"all_reduce Partial -> R"});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::all_gather(t.input(shard<RowSharded>(a, g))); }) ==
          V{"reduce_scatter Partial -> Row"});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::all_gather<Invariant>(t.input(shard<ColSharded>(a, g))); }) ==
          V{});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::split<RowSharded>(t.input(shard<Replicated>(a, g))); }) ==
          V{});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::split<ColSharded>(t.input(shard<Invariant>(a, g))); }) ==
          V{"all_gather C -> I"});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::reduce_scatter<RowSharded>(t.input(to_partial(shard<Replicated>(a, g)))); }) ==
          V{"all_gather Row -> R"});
    CHECK(listing([&](ad::Tape& t, Group g) { return ad::all_to_all<ColSharded>(t.input(shard<RowSharded>(a, g))); }) ==
          V{"all_to_all C -> Row"});
    CHECK(listing([&](ad::Tape& t, Group g) {
            return ad::matmul(t.input(shard<ColSharded>(a, g)), t.input(shard<RowSharded>(a, g)));
          }) == V{});  // a matmul's backward is local
  });
}

TEST_CASE("autodiff: misuse is an AutodiffError naming it; a value no path reaches has gradient 0") {
  run_ranks(1, [](ThreadComm& comm) {
    Group g(comm);
    ad::Tape t1, t2;
    auto a = t1.input(shard<Replicated>(Dense::Ones(2, 2), g));
    auto b = t2.input(shard<Replicated>(Dense::Ones(2, 2), g));
    CHECK_THROWS_WITH_AS((void)(a + b), "ad: operands on different tapes", ad::AutodiffError);
    auto unused = t1.input(shard<ColSharded>(Dense::Ones(2, 2), g));
    auto y = ad::sum(a);
    CHECK_THROWS_WITH_AS(t1.backward(a), "ad::Tape::backward: the output is 2x2; give its cotangent, or reduce it to 1x1 (ad::sum)",
                         ad::AutodiffError);
    t1.backward(y);
    CHECK_THROWS_WITH_AS(t1.backward(y), "ad::Tape::seed: the backward pass has run on this tape (build a new tape for another pass)",
                         ad::AutodiffError);
    CHECK(t1.grad(unused).local() == Dense::Zero(2, 2));
    CHECK(t1.grad(a).local() == Dense::Ones(2, 2));
    CHECK_THROWS_WITH_AS((void)t1.grad(b), "ad::Tape::grad: the value is not on this tape (a constant?)", ad::AutodiffError);
  });
}

TEST_CASE("ad::verify: inputs that do not divide at a checked world size are checked on their balanced blocks") {
  // 32 columns on 3 ranks: 11, 11, 10; 7 rows of x on 2, 3, 5 ranks (5: blocks of 2, 2, 1, 1, 1).
  const ad::Named in{{"x", rnd(7, 8, 1)}, {"w", rnd(8, 32, 2)}};
  auto program = [](ad::Builder<double>& b) {
    auto x = b.input<RowSharded>("x");
    auto w = b.input<ColSharded>("w");
    b.output("y", ad::matmul<ColSharded>(x, w));
  };
  check(ad::verify(program, in, {.worlds = {2, 3, 5}}));
}
