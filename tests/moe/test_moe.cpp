// tests/moe/test_moe.cpp — mixture of experts (issue 17) on thread worlds: the dense twin against
// finite differences; the layer against the dense twin at EP ∈ {1, 2, 4} × ETP ∈ {1, 2} with its
// ledger beside the analytic count; capacity's drop order. The variable-count all-to-all, the counts
// exchange and bad input: test_moe_exchange.cpp (one TU took 1.1 GB of compiler memory); a GPT with
// MoE blocks on the same loss curve at EP 1 and 2: test_moe_gpt.cpp.
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

}  // namespace

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

TEST_CASE("z: largest relative error of the MoE layer against the dense twin") {
  for (int e : {1, 2, 4})
    for (int t : {1, 2}) {
      const auto& w = worst("double ep" + std::to_string(e) + " etp" + std::to_string(t));
      MESSAGE("EP " << e << " x ETP " << t << ": " << w.rel << " (" << w.what << ")");
    }
  CHECK(true);
}
