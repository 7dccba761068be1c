// tests/moe/test_moe.cpp — mixture of experts (issue 17) on thread worlds: the variable-count
// all-to-all and its adjoint; the dense twin against finite differences; the layer against the
// dense twin at EP ∈ {1, 2, 4} × ETP ∈ {1, 2} with its ledger beside the analytic count; capacity's
// drop order; bad input. A GPT with MoE blocks on the same loss curve at EP 1 and 2: test_moe_gpt.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "moe_cases.hpp"

using namespace mc;

namespace {

struct Worst {
  double rel = 0;
  std::string what;
};
Worst& worst(const std::string& key) {
  static std::map<std::string, Worst> w;
  return w[key];
}

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

TEST_CASE("dense MoE twin: gradients agree with central finite differences (router, input, experts)") {
  bool dropped = false;
  for (const auto& c0 : cases()) {
    Case c = c0;
    c.tokens = 8, c.hidden = 5, c.ffn = 6;
    CAPTURE(c.name);
    auto m = make_ref<double>(c, 3);
    M x = make_x<double>(c, 4);
    const M dy = testing::random_real<double>(c.tokens, c.hidden, 5);
    const double daux = 1.7;
    const auto o = ref::moe_forward(m, x);
    const auto g = ref::moe_backward(m, x, o, dy, daux);
    auto loss = [&] {
      const auto oo = ref::moe_forward(m, x);
      return (dy.array() * oo.y.array()).sum() + daux * oo.aux;
    };
    constexpr double kFd = 1e-6;
    CHECK(ref::fd_error(loss, x, g.dx) < kFd);
    CHECK(ref::fd_error(loss, m.router, g.drouter) < kFd);
    for (std::size_t e : {0u, 3u}) {
      CHECK(ref::fd_error(loss, m.experts[e].w1, g.experts[e].dw1) < kFd);
      CHECK(ref::fd_error(loss, m.experts[e].w2, g.experts[e].dw2) < kFd);
      CHECK(ref::fd_error(loss, m.experts[e].b2, g.experts[e].db2) < kFd);
      if (c.act == nn::Activation::swiglu) CHECK(ref::fd_error(loss, m.experts[e].wu, g.experts[e].dwu) < kFd);
    }
    CHECK(o.aux > 0);
    Index kept = 0;
    for (auto n : o.processed) kept += n;
    if (!c.cf) CHECK(kept == c.k * c.tokens);
    dropped = dropped || kept < c.k * c.tokens;
  }
  CHECK(dropped);  // some capacity case dropped assignments: the checks above are not all dropless ones
}

TEST_CASE("MoE layer equals the dense twin at EP 1, 2, 4 x ETP 1, 2 (threads): output, aux loss, every gradient; "
          "the ledger's collectives are the analytic ones for the routing that occurred") {
  for (const auto& c : cases()) {
    for (int e : {1, 2, 4}) {
      for (int t : {1, 2}) {
        CAPTURE(c.name);
        CAPTURE(e);
        CAPTURE(t);
        const auto res = testing::per_rank<RankResult>(e * t, [&](const Group& g) { return run_case<double>(g, e, t, c); });
        const auto rm = make_ref<double>(c, 7);
        const auto ro = ref::moe_forward(rm, make_x<double>(c, 7));
        if (c.idle > 0) CHECK(ro.count[static_cast<std::size_t>(c.experts - 1)] == 0);  // the idle path is taken
        Index kept = 0;
        for (auto n : ro.processed) kept += n;
        CHECK((c.cf ? kept < c.k * c.tokens : kept == c.k * c.tokens));  // the capacity cases do drop
        for (const auto& r : res) {
          for (const auto& ck : r.checks) {
            CHECK_MESSAGE(ck.err.within(1e-12), ck.name << " ep=" << e << " etp=" << t << ": " << ck.err);
            auto& w = worst("double ep" + std::to_string(e) + " etp" + std::to_string(t));
            if (ck.err.max_rel >= w.rel) w = {ck.err.max_rel, ck.name};
          }
          CHECK(std::abs(r.aux - ro.aux) <= 1e-12 * std::abs(ro.aux));
          const std::string why = ledger_mismatch(r, expected_ledger(c, ro, e, r.ep_rank), 8);
          CHECK_MESSAGE(why.empty(), "ledger of rank (" << r.ep_rank << ", " << r.etp_rank << "): " << why);
        }
        if (c.name == cases()[0].name && e == 2 && t == 2) {  // for the record: one rank's ledger
          std::string table;
          for (const auto& en : res[0].ledger)
            table += "  " + en.scope + "  " + std::string(to_string(en.kind)) + " on " + en.axis + "  " +
                     std::to_string(en.elements) + " elements, " + std::to_string(en.bytes) + " B\n";
          const auto x = expected_ledger(c, ro, e, 0);
          MESSAGE("ledger of rank (0, 0) at EP 2 x ETP 2, " << c.name << " (analytic all_to_all: " << x.fwd_a2a[0] << " and "
                                                           << x.fwd_a2a[1] << " elements each way):\n" << table);
        }
      }
    }
  }
  SUBCASE("float at EP 2 x ETP 2 (≤ 1e-5)") {
    const auto c = cases()[0];
    const auto res = testing::per_rank<RankResult>(4, [&](const Group& g) { return run_case<float>(g, 2, 2, c); });
    for (const auto& r : res)
      for (const auto& ck : r.checks) CHECK_MESSAGE(ck.err.within(1e-5), ck.name << ": " << ck.err);
  }
}

TEST_CASE("tokens that EP does not divide (13 on 2 and 4 ranks; 3 on 4: a rank with none) equal the dense twin, "
          "capacity and routing included") {
  for (const auto& base : cases()) {
    for (Index tokens : {Index{13}, Index{3}}) {
      for (int e : {2, 4}) {
        for (int t : {1, 2}) {
          Case c = base;
          c.tokens = tokens;
          CAPTURE(c.name);
          CAPTURE(tokens);
          CAPTURE(e);
          CAPTURE(t);
          const auto res = testing::per_rank<RankResult>(e * t, [&](const Group& g) { return run_case<double>(g, e, t, c); });
          const auto ro = ref::moe_forward(make_ref<double>(c, 7), make_x<double>(c, 7));
          for (const auto& r : res) {
            for (const auto& ck : r.checks) CHECK_MESSAGE(ck.err.within(1e-12), ck.name << ": " << ck.err);
            CHECK(std::abs(r.aux - ro.aux) <= 1e-12 * std::abs(ro.aux));
          }
        }
      }
    }
  }
}

TEST_CASE("capacity: each expert keeps its first C assignments in global token order, at every EP") {
  // Every token prefers expert 0 (x·Wr favours column 0), k = 1, E = 2, 8 tokens, cf = 0.5:
  // C = ⌈0.5 · 1 · 8 / 2⌉ = 2, so tokens 0 and 1 are processed and tokens 2…7 dropped (output 0).
  Case c = named("all_to_expert0");
  c.k = 1, c.experts = 2, c.tokens = 8, c.hidden = 4, c.ffn = 4, c.cf = 0.5, c.aux = 0;
  auto rm = make_ref<double>(c, 11);
  rm.router = M::Zero(c.hidden, c.experts);
  rm.router(0, 0) = 5.0;
  M x = testing::random_real<double>(c.tokens, c.hidden, 12);
  x.col(0).array() = x.col(0).array().abs() + 1.0;
  CHECK(nn::MoeConfig(config(c)).capacity(c.tokens) == Index{2});
  for (int e : {1, 2}) {
    const auto ys = testing::per_rank<M>(e, [&](const Group& g) {
      Mesh mesh(g, {{"ep", e}, {"etp", 1}});
      const auto layer = nn::Moe<double>::from_dense(config(c), masters_of(c, rm), mesh);
      const auto X = shard<nn::Moe<double>::Tokens::axes>(testing::Mat<double>(x), mesh);
      return M(to_dense(layer.forward(X).y));
    });
    const M expert0 = ref::mlp_forward(rm.experts[0], x).z;
    for (Index t = 0; t < c.tokens; ++t) {
      CAPTURE(t);
      if (t < 2) CHECK(compare(ys[0].row(t), expert0.row(t)).max_abs <= 1e-15);
      else CHECK(ys[0].row(t).cwiseAbs().maxCoeff() == 0.0);
    }
  }
}

TEST_CASE("capacity: hand-computed C = ⌈cf·k·T/E⌉ clamped to [1, T], in the layer's config and in the dense twin") {
  struct Row {
    std::optional<double> cf;
    Index k, tokens, experts;
    std::optional<Index> c;  // worked out by hand
  };
  const std::vector<Row> rows = {
      {0.5, 1, 8, 2, 2},          // ⌈2⌉
      {1.0, 2, 16, 4, 8},         // ⌈8⌉
      {0.75, 2, 16, 4, 6},        // ⌈6⌉
      {1.25, 1, 10, 4, 4},        // ⌈3.125⌉
      {0.3, 1, 7, 4, 1},          // ⌈0.525⌉
      {1.0, 2, 4, 2, 4},          // ⌈4⌉ = T
      {3.0, 2, 4, 2, 4},          // ⌈6⌉ > T: T
      {1e19, 2, 16, 4, 16},       // far past T (and past 2^63): T
      {1e300, 1, 8, 2, 8},        // T
      {5e-324, 1, 8, 2, 1},       // ⌈2e-323⌉ = 1
      {5e-324, 1, 8, 16, 1},      // ⌈2.5e-324⌉ = 1 (the quotient rounds to 0 in double)
      {5e-324, 1, 2, 8, 1},       // ⌈1.2e-324⌉ = 1 (likewise)
      {1e-300, 2, 1000, 8, 1},    // 1
      {1.0, 1, 0, 2, 0},          // no token: nothing to keep
      {std::nullopt, 2, 16, 4, std::nullopt},  // dropless
  };
  for (const auto& r : rows) {
    CAPTURE(r.cf.value_or(-1));
    CAPTURE(r.k);
    CAPTURE(r.tokens);
    CAPTURE(r.experts);
    nn::MoeConfig cfg;
    cfg.experts = r.experts, cfg.top_k = r.k, cfg.capacity_factor = r.cf;
    CHECK(cfg.capacity(r.tokens) == r.c);
    ref::Moe m;
    m.experts.resize(static_cast<std::size_t>(r.experts));
    m.k = r.k, m.capacity_factor = r.cf;
    CHECK(ref::moe_capacity(m, r.tokens) == r.c);
  }
  nn::MoeConfig bad;
  bad.experts = 4, bad.top_k = 1, bad.capacity_factor = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS((void)bad.capacity(8),
                       "Moe: capacity factor inf must be positive and finite (leave it unset for dropless routing)", ShapeError);
}

TEST_CASE("capacity: a huge factor drops nothing, a tiny one keeps each expert's first assignment (EP 1, 2)") {
  // Every token prefers expert 0 (k = 1, E = 16, 8 tokens). cf 2e19 and 1e300: C = T, the output
  // is the dropless one; cf 5e-324: C = 1 (cf·k·T/E rounds to 0 in double), token 0 is processed and
  // tokens 1…7 dropped.
  Case c = named("all_to_expert0");
  c.k = 1, c.experts = 16, c.tokens = 8, c.hidden = 4, c.ffn = 4, c.aux = 0;
  auto rm = make_ref<double>(c, 11);
  rm.router = M::Zero(c.hidden, c.experts);
  rm.router(0, 0) = 5.0;
  M x = testing::random_real<double>(c.tokens, c.hidden, 12);
  x.col(0).array() = x.col(0).array().abs() + 1.0;
  const M expert0 = ref::mlp_forward(rm.experts[0], x).z;
  REQUIRE(expert0.rowwise().norm().minCoeff() > 0);  // a dropped token is told apart by its zero row
  for (double cf : {2e19, 1e300, 5e-324}) {
    c.cf = cf;
    for (int e : {1, 2}) {
      CAPTURE(cf);
      CAPTURE(e);
      const auto ys = testing::per_rank<M>(e, [&](const Group& g) {
        Mesh mesh(g, {{"ep", e}, {"etp", 1}});
        const auto layer = nn::Moe<double>::from_dense(config(c), masters_of(c, rm), mesh);
        const auto X = shard<nn::Moe<double>::Tokens::axes>(testing::Mat<double>(x), mesh);
        return M(to_dense(layer.forward(X).y));
      });
      const Index kept = cf < 1 ? 1 : c.tokens;
      for (Index t = 0; t < c.tokens; ++t) {
        CAPTURE(t);
        if (t < kept) CHECK(compare(ys[0].row(t), expert0.row(t)).max_abs <= 1e-15);
        else CHECK(ys[0].row(t).cwiseAbs().maxCoeff() == 0.0);
      }
    }
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

TEST_CASE("z: largest relative error of the MoE layer against the dense twin") {
  for (int e : {1, 2, 4})
    for (int t : {1, 2}) {
      const auto& w = worst("double ep" + std::to_string(e) + " etp" + std::to_string(t));
      MESSAGE("EP " << e << " x ETP " << t << ": " << w.rel << " (" << w.what << ")");
    }
  CHECK(true);
}
