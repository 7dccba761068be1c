// The explain log (issue 12): every op of a user's program in layout notation, with the
// collectives it caused, nested where an op runs other ops (matmul<To>, redistribute<To>, sum).
// The expected records are written out by hand from the rule table; the ledger's own entries are
// the independent count they are checked against.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "testing.hpp"

using namespace shardalg;

namespace {
// "4x6[C]" written out independently of shardalg::notation.
std::string shape(Index r, Index c, const char* layout) {
  return std::to_string(r) + "x" + std::to_string(c) + "[" + layout + "]";
}
}  // namespace

TEST_CASE("explain: an MLP's ops in notation, the all_reduce under the op that caused it (P = 1, 2, 3, 4, 8)") {
  std::mt19937 rng(20261123);
  for (int p : testing::world_sizes) {
    std::uniform_int_distribution<int> d(1, 4);
    const Index m = d(rng), k = d(rng), f = p * d(rng), n = d(rng);
    CAPTURE(p);
    CAPTURE(m);
    CAPTURE(f);
    run_ranks(p, [&](ThreadComm& c) {
      Ledger l;
      l.explain(true);
      Group g = ledgered(c, l);
      auto x = shard<Replicated>(testing::random_int<double>(m, k, 1), g);
      auto w1 = shard<ColSharded>(testing::random_int<double>(k, f, 2), g);
      auto w2 = shard<RowSharded>(testing::random_int<double>(f, n, 3), g);
      {
        auto s = l.scope("mlp");
        auto h = map(matmul(x, w1), [](double v) { return v > 0 ? v : 0.0; });  // X[R] · W1[C] → H[C]
        auto y = all_reduce(matmul(h, w2));                                    // H[C] · W2[Row] → Z[Partial] → Y[R]
        (void)y;
      }
      const auto& ops = l.explained();
      REQUIRE(ops.size() == 4);
      CHECK(ops[0].op == "matmul");
      CHECK(ops[0].layouts == shape(m, k, "R") + " · " + shape(k, f, "C") + " → " + shape(m, f, "C"));
      CHECK(ops[1].op == "map");
      CHECK(ops[1].layouts == "f(" + shape(m, f, "C") + ") → " + shape(m, f, "C"));
      CHECK(ops[2].op == "matmul");
      CHECK(ops[2].layouts == shape(m, f, "C") + " · " + shape(f, n, "Row") + " → " + shape(m, n, "Partial"));
      CHECK(ops[3].op == "all_reduce");
      CHECK(ops[3].layouts == shape(m, n, "Partial") + " → " + shape(m, n, "R"));
      for (const auto& r : ops) {
        CHECK(r.scope == "mlp");
        CHECK(r.depth == 0);
        CHECK(r.dtype == "f64");
      }
      // The ledger holds one collective; it is the all_reduce's, and nothing else caused one.
      REQUIRE(l.entries().size() == 1);
      CHECK(ops[0].collectives.empty());
      CHECK(ops[1].collectives.empty());
      CHECK(ops[2].collectives.empty());
      REQUIRE(ops[3].collectives.size() == 1);
      CHECK(l.entries()[ops[3].collectives[0]].kind == CollectiveKind::all_reduce);
      CHECK(l.entries()[ops[3].collectives[0]].elements == static_cast<std::size_t>(m * n));
    });
  }
}

TEST_CASE("explain: the log as text, exactly (P = 2)") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    l.explain(true);
    Group g = ledgered(c, l);
    auto h = shard<ColSharded>(testing::random_int<double>(8, 32, 4), g);
    auto w2 = shard<RowSharded>(testing::random_int<double>(32, 16, 5), g);
    auto y = all_reduce(matmul(h, w2));
    (void)y;
    CHECK(l.explain_log() ==
          "scope  op          dtype  layouts                               collectives\n"
          "-      matmul      f64    8x32[C] · 32x16[Row] → 8x16[Partial]  -\n"
          "-      all_reduce  f64    8x16[Partial] → 8x16[R]               all_reduce 128 x f64 = 1.0 KiB on 2 ranks\n");
  });
}

TEST_CASE("explain: matmul<R> lists its local product and the collective it inserted under it (P = 2, 3, 4)") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    run_ranks(p, [&](ThreadComm& c) {
      Ledger l;
      l.explain(true);
      Group g = ledgered(c, l);
      const Index m = 3, k = 5, n = 2 * p;
      auto x = shard<Replicated>(testing::random_int<double>(m, k, 6), g);
      auto w = shard<ColSharded>(testing::random_int<double>(k, n, 7), g);
      auto y = matmul<Replicated>(x, w);  // X[R] · W[C] → [C], then all_gather → [R]
      (void)y;
      const auto& ops = l.explained();
      REQUIRE(ops.size() == 3);
      CHECK(ops[0].op == "matmul<R>");
      CHECK(ops[0].depth == 0);
      CHECK(ops[0].layouts == shape(m, k, "R") + " · " + shape(k, n, "C") + " → " + shape(m, n, "R"));
      CHECK(ops[0].collectives.empty());
      CHECK(ops[1].op == "matmul");
      CHECK(ops[1].depth == 1);
      CHECK(ops[1].layouts == shape(m, k, "R") + " · " + shape(k, n, "C") + " → " + shape(m, n, "C"));
      CHECK(ops[2].op == "all_gather");
      CHECK(ops[2].depth == 1);
      CHECK(ops[2].layouts == shape(m, n, "C") + " → " + shape(m, n, "R"));
      REQUIRE(ops[2].collectives.size() == 1);
      REQUIRE(l.entries().size() == 1);
      CHECK(l.entries()[0].kind == CollectiveKind::all_gather);
    });
  }
}

TEST_CASE("explain: sum of a Row tensor nests its all_reduce; a transposed operand is written (·)ᵀ") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    l.explain(true);
    Group g = ledgered(c, l);
    auto x = shard<RowSharded>(testing::random_int<double>(4, 3, 8), g);
    auto dy = shard<RowSharded>(testing::random_int<double>(4, 5, 9), g);
    (void)sum(x);
    (void)matmul(transpose(x), dy);  // Xᵀ · dY: (4x3[Row])ᵀ acts as 3x4[C]; C · Row → Partial
    const auto& ops = l.explained();
    REQUIRE(ops.size() == 3);
    CHECK(ops[0].op == "sum");
    CHECK(ops[0].layouts == "Σ 4x3[Row] → 1x1[R]");
    CHECK(ops[1].op == "all_reduce");
    CHECK(ops[1].depth == 1);
    CHECK(ops[1].collectives.size() == 1);
    CHECK(ops[2].op == "matmul");
    CHECK(ops[2].depth == 0);
    CHECK(ops[2].layouts == "(4x3[Row])ᵀ · 4x5[Row] → 3x5[Partial]");
  });
}

TEST_CASE("explain: sum of an I value is I; copy_to (f) is a line of its own, with no collective") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    l.explain(true);
    Group g = ledgered(c, l);
    auto x = shard<Invariant>(testing::random_int<double>(8, 16, 4), g);
    (void)sum(x);      // Σ X[I] → s[I]: local, and still I
    (void)copy_to(x);  // f: X[I] → X[R]; its adjoint is the backward's all-reduce
    const auto& ops = l.explained();
    REQUIRE(ops.size() == 2);
    CHECK(ops[0].op == "sum");
    CHECK(ops[0].layouts == "Σ 8x16[I] → 1x1[I]");
    CHECK(ops[1].op == "copy_to (f)");
    CHECK(ops[1].layouts == "8x16[I] → 8x16[R]");
    CHECK(ops[1].collectives.empty());
    CHECK(l.entries().empty());
  });
}

TEST_CASE("explain: off by default; a raw Group call is a line of its own; a user's op nests ops") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    Group g = ledgered(c, l);
    auto z = Sharded<double, Partial>(testing::random_int<double>(2, 2, 3), 2, 2, g);
    (void)all_reduce(z);
    CHECK(l.entries().size() == 1);
    CHECK(l.explained().empty());  // explain off: nothing recorded, the ledger still counts

    l.explain(true);
    double v = 1.0;
    g.all_reduce(&v, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
    {
      auto mine = explain_op(g, "my_layer", DType::f64, [] { return std::string("mine"); });
      (void)all_reduce(z);
    }
    const auto& ops = l.explained();
    REQUIRE(ops.size() == 3);
    CHECK(ops[0].op == "-");
    CHECK(ops[0].layouts == "Partial → R");
    CHECK(ops[0].collectives == std::vector<std::size_t>{1});
    CHECK(ops[1].op == "my_layer");
    CHECK(ops[1].layouts == "mine");
    CHECK(ops[1].collectives.empty());
    CHECK(ops[2].op == "all_reduce");
    CHECK(ops[2].depth == 1);
    CHECK(ops[2].collectives == std::vector<std::size_t>{2});
  });
}

TEST_CASE("explain: a plain group (no ledger) runs the same ops without a log") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    auto x = shard<ColSharded>(testing::random_int<double>(4, 4, 1), g);
    auto e = explain_op(g, "never", DType::f64, []() -> std::string {
      FAIL("the text of an op is formatted without an explaining ledger");
      return {};
    });
    CHECK(to_dense(all_gather(x)) == testing::random_int<double>(4, 4, 1));
  });
}
