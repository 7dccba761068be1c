// Debugging a user's own program: a Chrome trace of the ledger, scopes that work with or without
// a ledger, and the block map of a tensor (issue 12).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <vector>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

TEST_CASE("the ledger's Chrome trace: one complete event per collective, with scope, layouts and bytes") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    Group g = ledgered(c, l);
    auto x = shard<ColSharded>(testing::random_int<double>(4, 6, 1), g);
    {
      auto s = l.scope("fwd");
      auto r = all_gather(x);
      (void)all_reduce(to_partial(r));
    }
    const auto j = nlohmann::json::parse(l.chrome_trace(c.rank()));
    const auto& ev = j["traceEvents"];
    REQUIRE(ev.size() == 2);
    CHECK(ev[0]["name"] == "all_gather");
    CHECK(ev[0]["cat"] == "fwd");
    CHECK(ev[0]["ph"] == "X");
    CHECK(ev[0]["tid"] == c.rank());
    CHECK(ev[0]["args"]["layouts"] == "C -> R");
    CHECK(ev[0]["args"]["bytes"] == 4 * 6 * 8);
    CHECK(ev[1]["name"] == "all_reduce");
    CHECK(ev[1]["args"]["layouts"] == "Partial -> R");
    CHECK(ev[0]["dur"].get<double>() >= 0.0);
    CHECK(ev[1]["ts"].get<double>() >= ev[0]["ts"].get<double>() + ev[0]["dur"].get<double>());
    CHECK(l.entries()[0].end_seconds >= l.entries()[0].start_seconds);
  });
}

TEST_CASE("the ledger's Chrome trace: ranks whose ledgers were made 100 ms apart merge on one clock") {
  // Rank 1 makes its ledger 100 ms before rank 0 does; both then run one all-reduce together. On
  // the system clock the two events are the same moment; on per-ledger clocks they would be
  // ~100 ms apart.
  using namespace std::chrono;
  const auto wall_us = [] { return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count(); };
  const long long before = wall_us();
  std::vector<nlohmann::json> ev(2);
  run_ranks(2, [&](ThreadComm& c) {
    std::optional<Ledger> l;
    if (c.rank() == 1) l.emplace();
    std::this_thread::sleep_for(milliseconds(100));
    if (c.rank() == 0) l.emplace();
    Group g = ledgered(c, *l);
    (void)all_reduce(Sharded<double, Partial>(testing::random_int<double>(2, 2, 3), 2, 2, g));
    ev[static_cast<std::size_t>(c.rank())] = nlohmann::json::parse(l->chrome_trace(c.rank()))["traceEvents"][0];
  });
  const long long after = wall_us();
  for (const auto& e : ev) {
    CHECK(e["ts"].get<double>() >= static_cast<double>(before));
    CHECK(e["ts"].get<double>() + e["dur"].get<double>() <= static_cast<double>(after) + 1.0);
  }
  // Both ranks leave the all-reduce after both have entered it: the ends lie within 50 ms.
  const double end0 = ev[0]["ts"].get<double>() + ev[0]["dur"].get<double>();
  const double end1 = ev[1]["ts"].get<double>() + ev[1]["dur"].get<double>();
  CHECK(std::abs(end0 - end1) < 50'000.0);
}

TEST_CASE("the ledger's table: one column per field, the mesh axis included, widened to the longest entry") {
  Ledger l;
  CallInfo dp{.layout_in = "Partial(max)", .layout_out = "Replicated"};
  CallInfo tp{.layout_in = "Partial", .layout_out = "R"};
  (void)l.record(CollectiveKind::all_reduce, 1, DType::f64, dp, 2, "dp");
  (void)l.record(CollectiveKind::all_reduce, 1, DType::f64, tp, 2, "tp");
  {
    auto s = l.scope("block.0");
    auto s2 = l.scope("mlp");
    auto s3 = l.scope("grad_norm.w1");
    (void)l.record(CollectiveKind::all_gather, 48, DType::f32, CallInfo{.layout_in = "C", .layout_out = "R"}, 4);
  }
  CHECK(l.table() ==
        "scope                     axis  collective      layouts                         elements       bytes  dtype\n"
        "-                         dp    all_reduce      Partial(max) -> Replicated             1           8  f64\n"
        "-                         tp    all_reduce      Partial -> R                           1           8  f64\n"
        "block.0/mlp/grad_norm.w1  -     all_gather      C -> R                                48         192  f32\n");
}

TEST_CASE("shardalg::scope labels a ledgered group and is a no-op on a plain one") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    for (Group g : {Group(c), ledgered(c, l)}) {
      auto z = Sharded<double, Partial>(testing::random_int<double>(2, 2, 3), 2, 2, g);
      auto s = shardalg::scope(z.group(), "mine");
      (void)all_reduce(z);
    }
    REQUIRE(l.entries().size() == 1);
    CHECK(l.entries()[0].scope == "mine");
  });
}

TEST_CASE("visualize: which rank holds which block") {
  run_ranks(3, [](ThreadComm& c) {
    Group g = c;
    auto x = shard<ColSharded>(Mat<double>::Zero(8, 6), g);
    CHECK(visualize(x) ==
          "8x6 ColSharded on 3 ranks (each holds 8x2)\n"
          "  rank 0: rows 0..7, cols 0..1\n"
          "  rank 1: rows 0..7, cols 2..3\n"
          "  rank 2: rows 0..7, cols 4..5\n");
    CHECK(visualize(shard<RowSharded>(Mat<double>::Zero(6, 4), g)) ==
          "6x4 RowSharded on 3 ranks (each holds 2x4)\n"
          "  rank 0: rows 0..1, cols 0..3\n"
          "  rank 1: rows 2..3, cols 0..3\n"
          "  rank 2: rows 4..5, cols 0..3\n");
    CHECK(visualize(shard<Replicated>(Mat<double>::Zero(2, 5), g)) ==
          "2x5 Replicated on 3 ranks: every rank holds the whole 2x5\n");
    CHECK(visualize(shard<Partial>(Mat<double>::Zero(2, 5), g)) ==
          "2x5 Partial on 3 ranks: every rank holds a 2x5 summand; the value is their sum\n");
  });
}
