// The matmul rule table as laws: for every valid pair of layouts, with and without transposed
// operands, over world sizes 1, 2, 3, 4, 8 and float and double (the integer types are
// test_matmul_laws_int.cpp),
//   to_dense(matmul(shard(A), shard(B))) == A · B   exactly (integer-valued operands).
// The table itself is checked against the spec (ALGEBRA.md), written out independently here.
#include <doctest/doctest.h>

#include "matmul_laws_cases.hpp"
#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {

using K = LayoutKind;

// ALGEBRA.md's matmul table, typed in by hand: result layout, or nothing for ✗.
struct Expect {
  K a, b;
  bool valid;
  K result;
};
constexpr Expect spec[] = {
    {K::replicated, K::replicated, true, K::replicated}, {K::replicated, K::row, true, K::partial},
    {K::replicated, K::col, true, K::col},               {K::replicated, K::partial, true, K::partial},
    {K::row, K::replicated, true, K::row},               {K::row, K::row, false, {}},
    {K::row, K::col, false, {}},                         {K::row, K::partial, false, {}},
    {K::col, K::replicated, true, K::partial},           {K::col, K::row, true, K::partial},
    {K::col, K::col, false, {}},                         {K::col, K::partial, false, {}},
    {K::partial, K::replicated, true, K::partial},       {K::partial, K::row, false, {}},
    {K::partial, K::col, false, {}},                     {K::partial, K::partial, false, {}},
};

TEST_CASE("the matmul rule table matches the specification") {
  for (const auto& e : spec) {
    CAPTURE(notation(e.a));
    CAPTURE(notation(e.b));
    const auto r = matmul_rule(e.a, e.b);
    CHECK(r.valid == e.valid);
    if (e.valid) CHECK(r.result == e.result);
  }
}

TEST_CASE("transposition swaps Row and C and fixes R and Partial") {
  CHECK(std::is_same_v<transpose_t<Replicated>, Replicated>);
  CHECK(std::is_same_v<transpose_t<RowSharded>, ColSharded>);
  CHECK(std::is_same_v<transpose_t<ColSharded>, RowSharded>);
  CHECK(std::is_same_v<transpose_t<Partial>, Partial>);
}

}  // namespace

TEST_CASE_TEMPLATE("matmul laws over every valid layout pair, transposes and world sizes", T, float, double) {
  matmul_laws::every_law<T>();
}

TEST_CASE("matmul with real values matches the dense product to rounding") {
  for (int p : {2, 3, 4}) {
    const Index m = 6 * p, k = 5 * p, n = 4 * p;
    const Mat<double> X = testing::random_real<double>(m, k, 1), W = testing::random_real<double>(k, n, 2),
                      W2 = testing::random_real<double>(n, k, 3);
    const Mat<double> expected = (X * W) * W2;
    auto rel = testing::per_rank<double>(p, [&](Group g) {
      auto y = all_reduce(matmul(matmul(shard<Replicated>(X, g), shard<ColSharded>(W, g)), shard<RowSharded>(W2, g)));
      return compare(y, expected).max_rel;
    });
    for (double r : rel) CHECK(r <= 1e-14);
  }
}
