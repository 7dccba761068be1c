// Bad input: a typed exception whose message names the values, checked by its exact text; and
// a throwing call loses nothing.
#include <doctest/doctest.h>

#include <cstdint>
#include <ios>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

TEST_CASE("a local block that is not the rank's share of the balanced split") {
  run_ranks(3, [](ThreadComm& c) {
    Group g = c;
    // 10 rows on 3 ranks: 4, 3, 3. Rank 2 claiming 4 rows, or rank 0 claiming 3, is refused.
    const Index mine = c.rank() == 0 ? 3 : 4;
    const std::string want = c.rank() == 0 ? "4x6" : "3x6";
    const std::string text = "Sharded<RowSharded>: local block " + std::to_string(mine) + "x6 is not rank " +
                             std::to_string(c.rank()) + "'s share of 10x6 on a group of size 3 (expected " + want + ")";
    CHECK_THROWS_WITH_AS((Sharded<double, RowSharded>(Mat<double>::Zero(mine, 6), 10, 6, g)), text.c_str(),
                         GroupSizeError);
    // 2 columns on 3 ranks: 1, 1, 0 — rank 2 holds none.
    const Index cols = c.rank() < 2 ? 1 : 0;
    CHECK_NOTHROW((Sharded<double, ColSharded>(Mat<double>::Zero(4, cols), 4, 2, g)));
    CHECK_THROWS_AS((Sharded<double, ColSharded>(Mat<double>::Zero(4, 1 - cols), 4, 2, g)), GroupSizeError);
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
    const std::string share = "Sharded<ColSharded>: local block 4x6 is not rank " + std::to_string(c.rank()) +
                              "'s share of 4x12 on a group of size 4 (expected 4x3)";
    CHECK_THROWS_WITH_AS((Sharded<double, ColSharded>(Mat<double>::Zero(4, 6), 4, 12, g)), share.c_str(), GroupSizeError);
  });
}

TEST_CASE("run_ranks needs a positive world size") {
  CHECK_THROWS_WITH_AS(run_ranks(0, [](ThreadComm&) {}), "run_ranks: world size 0 must be at least 1", CommError);
}

namespace {
enum Plain { plain_three = 3 };
struct Streamed {
  int v;
  friend std::ostream& operator<<(std::ostream& os, const Streamed& s) { return os << "<" << s.v << ">"; }
};
/// What `os << … << args` writes: the definition cat must keep.
template <class... Args>
std::string streamed(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace

TEST_CASE("an error message's text: cat writes each argument as an ostream does") {
  const std::string s = "std::string";
  const std::string_view sv = "a view";
  const char* p = "a pointer";
  const double reals[] = {0.0, -0.5, 1.0 / 3.0, 1e-300, 6.02214076e23, 123456789.0, 2.5e-7};
  for (double d : reals) {
    CHECK(detail::cat(d) == streamed(d));
    CHECK(detail::cat(static_cast<float>(d)) == streamed(static_cast<float>(d)));
    CHECK(detail::cat(static_cast<long double>(d)) == streamed(static_cast<long double>(d)));
  }
  CHECK(detail::cat('x', static_cast<signed char>('y'), static_cast<unsigned char>('z')) ==
        streamed('x', static_cast<signed char>('y'), static_cast<unsigned char>('z')));
  CHECK(detail::cat(true, false) == "10");
  CHECK(detail::cat(-7, 7u, -9L, 9UL, std::numeric_limits<long long>::min(),
                    std::numeric_limits<unsigned long long>::max(), Index{-3}, std::size_t{42}, std::int8_t{65},
                    std::uint16_t{65535}) ==
        streamed(-7, 7u, -9L, 9UL, std::numeric_limits<long long>::min(), std::numeric_limits<unsigned long long>::max(),
                 Index{-3}, std::size_t{42}, std::int8_t{65}, std::uint16_t{65535}));
  CHECK(detail::cat("literal ", s, " ", sv, " ", p) == "literal std::string a view a pointer");
  CHECK(detail::cat(plain_three, Streamed{5}, std::string_view{}) == "3<5>");
  CHECK(detail::cat() == "");
  // A manipulator reaches the stream and holds for what follows, as it does in an ostream.
  CHECK(detail::cat(std::hex, 255, " ", 1.0 / 3.0) == streamed(std::hex, 255, " ", 1.0 / 3.0));
}
