// Debugging a user's own program: a Chrome trace of the ledger, scopes that work with or without
// a ledger, and the block map of a tensor (issue 12).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

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
