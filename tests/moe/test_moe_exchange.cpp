// tests/moe/test_moe_exchange.cpp — mixture of experts on thread worlds: the variable-count
// all-to-all and its adjoint (exact), the counts exchange's integer check, and bad input with its
// typed errors (apart from test_moe.cpp to keep each TU under 1 GB of compiler memory).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "moe_cases.hpp"

using namespace mc;

namespace {

/// Rank r's run s of the exchange test: rows of integers that name (sender, receiver, row, column).
M run_rows(int from, int to, Index n, Index cols) {
  M m(n, cols);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = 1000.0 * from + 100.0 * to + 10.0 * static_cast<double>(i) + static_cast<double>(j);
  return m;
}
/// How many rows rank `from` sends rank `to` (zeros included), for a seed.
Index run_count(int from, int to, int seed) { return (from * 7 + to * 3 + seed) % 4; }

}  // namespace

TEST_CASE("all_to_allv: every run reaches its rank, the adjoint is the inverse and the pairing law holds (exact)") {
  const Index cols = 3;
  for (int p : {1, 2, 3, 4}) {
    for (int seed : {0, 1, 2}) {
      CAPTURE(p);
      CAPTURE(seed);
      struct Out {
        bool arrived = true, inverse = true;
        double lhs = 0, rhs = 0;  // ⟨A(x), y⟩ and ⟨x, A*(y)⟩, this rank's summands
        std::vector<LedgerEntry> ledger;
        Index sent = 0;
      };
      const auto res = testing::per_rank<Out>(p, [&](const Group& world) {
        Ledger ledger;
        const Group g = ledgered(world, ledger);
        const int r = g.rank();
        std::vector<Index> send(static_cast<std::size_t>(p)), recv(static_cast<std::size_t>(p));
        std::vector<M> runs;
        Index total = 0;
        for (int s = 0; s < p; ++s) {
          send[static_cast<std::size_t>(s)] = run_count(r, s, seed);
          recv[static_cast<std::size_t>(s)] = run_count(s, r, seed);
          runs.push_back(run_rows(r, s, send[static_cast<std::size_t>(s)], cols));
          total += send[static_cast<std::size_t>(s)];
        }
        testing::Mat<double> x(total, cols);
        for (Index o = 0, s = 0; s < p; o += send[static_cast<std::size_t>(s)], ++s)
          x.middleRows(o, send[static_cast<std::size_t>(s)]) = runs[static_cast<std::size_t>(s)];
        const RaggedRows<double> X{x, send, g};
        const auto Y = all_to_allv(X, recv);
        Out o;
        o.ledger = ledger.entries();
        o.sent = total;
        for (int s = 0; s < p; ++s)  // run s of Y: rank s's run for this rank
          o.arrived = o.arrived && Y.local.middleRows(Y.offset(s), recv[static_cast<std::size_t>(s)]) ==
                                       run_rows(s, r, recv[static_cast<std::size_t>(s)], cols);
        // A cotangent shaped like Y, integer valued; the adjoint sends it back.
        testing::Mat<double> yv = testing::random_int<double>(Y.local.rows(), cols, 50 + r);
        const auto back = adjoint::all_to_allv(RaggedRows<double>{yv, recv, g}, send);
        o.lhs = (Y.local.array() * yv.array()).sum();
        o.rhs = (x.array() * back.local.array()).sum();
        o.inverse = adjoint::all_to_allv(Y, send).local == x;
        return o;
      });
      double lhs = 0, rhs = 0;
      for (int r = 0; r < p; ++r) {
        CHECK(res[r].arrived);
        CHECK(res[r].inverse);
        lhs += res[r].lhs;
        rhs += res[r].rhs;
        // ledger: the forward is one all_to_all of the elements this rank sends (its own run too)
        REQUIRE(res[r].ledger.size() == 1);
        CHECK(res[r].ledger[0].kind == CollectiveKind::all_to_all);
        CHECK(res[r].ledger[0].elements == static_cast<std::size_t>(res[r].sent * cols));
        CHECK(res[r].ledger[0].bytes == static_cast<std::size_t>(res[r].sent * cols) * 8);
      }
      CHECK(lhs == rhs);
    }
  }
  SUBCASE("bad counts are ShapeErrors naming them; counts the peers disagree with, a CommError before any row moves") {
    auto on = [](int p, auto fn) { run_ranks(p, [&](ThreadComm& c) { fn(Group(c)); }); };
    CHECK_THROWS_WITH_AS(on(2, [](const Group& g) { (void)all_to_allv(RaggedRows<double>{testing::Mat<double>(3, 2), {1, 2, 0}, g}, {1, 1}); }),
                         "all_to_allv (send): 3 row counts for a group of 2 ranks", ShapeError);
    CHECK_THROWS_WITH_AS(on(1, [](const Group& g) { (void)all_to_allv(RaggedRows<double>{testing::Mat<double>(3, 2), {2}, g}, {2}); }),
                         "all_to_allv (send): the row counts add up to 2 but the block has 3 rows", ShapeError);
    CHECK_THROWS_WITH_AS(on(1, [](const Group& g) { (void)all_to_allv(RaggedRows<double>{testing::Mat<double>(0, 2), {0}, g}, {-1}); }),
                         "all_to_allv (receive): row count -1 for rank 0 is negative", ShapeError);
    CHECK_THROWS_AS(on(2, [](const Group& g) {
                      // rank 0 expects 2 rows from rank 1, which sends it 1
                      const Index n = g.rank() == 0 ? 1 : 2;
                      (void)all_to_allv(RaggedRows<double>{testing::Mat<double>::Zero(n, 2), {n - 1, 1}, g},
                                        g.rank() == 0 ? std::vector<Index>{0, 2} : std::vector<Index>{1, 1});
                    }),
                    CommError);
  }
}

TEST_CASE("counts exchange: a count is checked back to an integer; more assignments than T carries exactly are refused") {
  CHECK(nn::detail::checked_count(7.0f, 10, "assignment count") == 7);
  CHECK_THROWS_WITH_AS((void)nn::detail::checked_count(2.5f, 10, "assignment count"),
                       "Moe: assignment count 2.5 is not a whole number in [0, 10]", ShapeError);
  CHECK_THROWS_WITH_AS((void)nn::detail::checked_count(11.0, 10, "assignment count"),
                       "Moe: assignment count 11 is not a whole number in [0, 10]", ShapeError);
  CHECK_THROWS_WITH_AS((void)nn::detail::checked_count(-1.0, 10, "assignment count"),
                       "Moe: assignment count -1 is not a whole number in [0, 10]", ShapeError);
  CHECK_THROWS_AS((void)nn::detail::checked_count(std::numeric_limits<double>::quiet_NaN(), 10, "assignment count"),
                  ShapeError);
  CHECK_THROWS_AS((void)nn::detail::checked_count(1e30, std::numeric_limits<Index>::max(), "assignment count"), ShapeError);
  // float carries whole numbers exactly up to 2^24, and an expert's count of one rank's assignments
  // is at most its tokens: 2^24 + 1 tokens on a rank are one too many.
  nn::MoeConfig cfg;
  cfg.hidden = 1, cfg.experts = 2, cfg.top_k = 1, cfg.ffn = 1, cfg.bias = false;
  const Index t = (Index{1} << 24) + 1;
  CHECK_THROWS_WITH_AS(run_ranks(1,
                                 [&](ThreadComm& comm) {
                                   Mesh mesh(comm, {{"ep", 1}, {"etp", 1}});
                                   const auto layer = nn::Moe<float>::init(cfg, mesh, {});
                                   (void)layer.forward(nn::Moe<float>::Tokens(testing::Mat<float>::Zero(t, 1), t, 1, mesh));
                                 }),
                       "Moe: 16777217 tokens on one rank exceed 16777216, the largest count the counts exchange "
                       "carries exactly in f32",
                       ShapeError);
}

TEST_CASE("bad input: typed errors naming the values") {
  auto on = [](int p, auto fn) { run_ranks(p, [&](ThreadComm& comm) { fn(Group(comm)); }); };
  auto build = [](const Group& g, int e, int t, nn::MoeConfig cfg) {
    Mesh mesh(g, {{"ep", e}, {"etp", t}});
    (void)nn::Moe<double>::init(cfg, mesh, {});
  };
  auto cfg = config(cases()[0]);
  cfg.experts = 6;
  CHECK_THROWS_WITH_AS(on(4, [&](const Group& g) { build(g, 4, 1, cfg); }),
                       "Moe: 6 experts are not divisible by expert-parallel size 4", DivisibilityError);
  cfg = config(cases()[0]);
  cfg.top_k = 5;
  CHECK_THROWS_WITH_AS(on(1, [&](const Group& g) { build(g, 1, 1, cfg); }),
                       "MoE router: top-k 5 is larger than the number of experts 4", ShapeError);
  cfg.top_k = 0;
  CHECK_THROWS_WITH_AS(on(1, [&](const Group& g) { build(g, 1, 1, cfg); }), "MoE router: top-k 0 must be at least 1",
                       ShapeError);
  cfg = config(cases()[0]);
  cfg.capacity_factor = 0.0;
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) { build(g, 2, 1, cfg); }),
                       "Moe: capacity factor 0 must be positive and finite (leave it unset for dropless routing)", ShapeError);
  cfg.capacity_factor = -1.5;
  CHECK_THROWS_WITH_AS(on(1, [&](const Group& g) { build(g, 1, 1, cfg); }),
                       "Moe: capacity factor -1.5 must be positive and finite (leave it unset for dropless routing)", ShapeError);
  cfg = config(cases()[0]);
  cfg.ffn = 6;
  cfg.act = nn::Activation::swiglu;  // the fused gate|up needs F divisible by the expert's TP
  CHECK_THROWS_WITH_AS(on(4, [&](const Group& g) { build(g, 1, 4, cfg); }),
                       "Mlp (SwiGLU): ffn size 6 is not divisible by tensor-parallel size 4", DivisibilityError);
  cfg = config(cases()[0]);
  cfg.aux_loss_coeff = -0.1;
  CHECK_THROWS_WITH_AS(on(1, [&](const Group& g) { build(g, 1, 1, cfg); }),
                       "MoE router: aux loss coefficient -0.1 must be finite and not negative", ShapeError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         Mesh mesh(g, {{"tp", 2}});
                         (void)nn::Moe<double>::init(config(cases()[0]), mesh, {});
                       }),
                       "Mesh: no axis \"ep\" in the mesh tp=2", MeshError);
  CHECK_THROWS_WITH_AS(on(2, [&](const Group& g) {
                         Mesh mesh(g, {{"ep", 2}, {"etp", 1}});
                         const auto layer = nn::Moe<double>::init(config(cases()[0]), mesh, {});
                         (void)layer.forward(shard<nn::Moe<double>::Tokens::axes>(testing::random_real<double>(8, 7, 1), mesh));
                       }),
                       "Moe: input has 7 columns, expected 8", ShapeError);
}
