// Bad input: a typed exception whose message names the values, checked by its exact text; and
// a throwing call loses nothing.
#include <doctest/doctest.h>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

TEST_CASE("a dimension not divisible by the group size") {
  run_ranks(3, [](ThreadComm& c) {
    Group g = c;
    const Mat<double> A = Mat<double>::Zero(10, 6);
    CHECK_THROWS_WITH_AS(shard<RowSharded>(A, g), "shard<RowSharded>: rows 10 is not divisible by group size 3",
                         DivisibilityError);
    CHECK_THROWS_WITH_AS(shard<ColSharded>(Mat<double>::Zero(4, 10), g),
                         "shard<ColSharded>: cols 10 is not divisible by group size 3", DivisibilityError);
    auto p = Sharded<double, Partial>(Mat<double>::Zero(4, 6), 4, 6, g);
    CHECK_THROWS_WITH_AS(reduce_scatter<RowSharded>(p), "reduce_scatter<RowSharded>: rows 4 is not divisible by group size 3",
                         DivisibilityError);
    auto r = shard<Replicated>(Mat<double>::Zero(4, 6), g);
    CHECK_THROWS_WITH_AS(split<RowSharded>(r), "split<RowSharded>: rows 4 is not divisible by group size 3",
                         DivisibilityError);
    auto rows = shard<RowSharded>(Mat<double>::Zero(6, 4), g);
    CHECK_THROWS_WITH_AS(all_to_all<ColSharded>(rows), "all_to_all<ColSharded>: cols 4 is not divisible by group size 3",
                         DivisibilityError);
  });
}

TEST_CASE("shapes that do not chain") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    auto a = shard<Replicated>(Mat<double>::Zero(4, 5), g);
    auto b = shard<ColSharded>(Mat<double>::Zero(6, 4), g);
    CHECK_THROWS_WITH_AS(matmul(a, b), "matmul: inner dimensions do not match: 4x5 · 6x4", ShapeError);
    CHECK_THROWS_WITH_AS(matmul(transpose(a), transpose(a)), "matmul: inner dimensions do not match: 5x4 · 5x4",
                         ShapeError);
    auto x = shard<Replicated>(Mat<double>::Zero(4, 4), g);
    CHECK_THROWS_WITH_AS(x + a, "add: shapes differ: 4x4 and 4x5", ShapeError);
    CHECK_THROWS_WITH_AS(hadamard(x, a), "hadamard: shapes differ: 4x4 and 4x5", ShapeError);
    CHECK_THROWS_WITH_AS(add_bias(x, shard<Replicated>(Mat<double>::Zero(1, 3), g)),
                         "add_bias: bias is 1x3 but the activation has 4 columns (expected 1x4)", ShapeError);
  });
}

TEST_CASE("tensors from different groups") {
  Group self = SelfComm{};
  run_ranks(2, [&](ThreadComm& c) {
    Group g = c;
    auto a = shard<Replicated>(Mat<double>::Zero(2, 2), g);
    auto b = shard<Replicated>(Mat<double>::Zero(2, 2), self);
    CHECK_THROWS_WITH_AS(matmul(a, b),
                         "matmul: operands belong to different communicator groups (ThreadComm of 2 ranks and "
                         "SelfComm of 1 rank)",
                         GroupMismatchError);
    CHECK_THROWS_WITH_AS(a + b,
                         "add: operands belong to different communicator groups (ThreadComm of 2 ranks and "
                         "SelfComm of 1 rank)",
                         GroupMismatchError);
  });
  // Two worlds of the same size are still different groups.
  run_ranks(1, [&](ThreadComm& c) {
    auto a = shard<Replicated>(Mat<double>::Zero(2, 2), Group(c));
    auto b = shard<Replicated>(Mat<double>::Zero(2, 2), self);
    CHECK_THROWS_WITH_AS(matmul(a, b),
                         "matmul: operands belong to different communicator groups (ThreadComm of 1 rank and "
                         "SelfComm of 1 rank)",
                         GroupMismatchError);
  });
}

TEST_CASE("a sharded tensor handed to a communicator of another size") {
  Group self = SelfComm{};
  run_ranks(4, [&](ThreadComm& c) {
    Group g = c;
    auto x = shard<ColSharded>(testing::random_int<double>(4, 12, 1), g);
    const Mat<double> before = x.local();
    CHECK_THROWS_WITH_AS((void)std::move(x).rebind(self),
                         "rebind: a ColSharded tensor on a group of size 4 handed to a communicator of size 1",
                         GroupSizeError);
    CHECK(x.local() == before);  // the failed call moved nothing out
    CHECK_THROWS_WITH_AS((Sharded<double, ColSharded>(Mat<double>::Zero(4, 6), 4, 12, g)),
                         "Sharded<ColSharded>: local block 4x6 is not the share of 4x12 on a group of size 4 "
                         "(expected 4x3)",
                         GroupSizeError);
  });
}

TEST_CASE("run_ranks needs a positive world size") {
  CHECK_THROWS_WITH_AS(run_ranks(0, [](ThreadComm&) {}), "run_ranks: world size 0 must be at least 1", CommError);
}
