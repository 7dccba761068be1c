// Elementwise and row-wise rules as laws against the dense reference, and the rule functions
// against the spec table (ALGEBRA.md, "Elementwise and row-wise operations").
#include <doctest/doctest.h>

#include <cmath>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {
using K = LayoutKind;
constexpr K all_kinds[] = {K::replicated, K::row, K::col, K::partial};

template <class T>
double max_over(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}
}  // namespace

TEST_CASE("elementwise rules match the specification") {
  for (K a : all_kinds) {
    CAPTURE(notation(a));
    CHECK(rules::nonlinear(a).valid == (a != K::partial));
    CHECK(rules::scale(a).valid);
    CHECK(rules::rowwise(a).valid == (a == K::replicated || a == K::row));
    // Column sums: R → R, Row → Partial, C → C, Partial → Partial.
    CHECK(rules::col_sum(a).result == (a == K::row ? K::partial : a));
    // Row sums: R → R, Row → Row, C → Partial, Partial → Partial.
    CHECK(rules::row_sum(a).result == (a == K::col ? K::partial : a));
    for (K b : all_kinds) {
      CAPTURE(notation(b));
      CHECK(rules::add(a, b).valid == (a == b));
      const bool had = (a == b && a != K::partial) || (a == K::partial && b == K::replicated) ||
                       (a == K::replicated && b == K::partial);
      CHECK(rules::hadamard(a, b).valid == had);
      const bool bias_ok = a != K::partial && b == (a == K::col ? K::col : K::replicated);
      CHECK(rules::bias(a, b).valid == bias_ok);
    }
  }
}

// Linear operations on every layout: (A + B), (A − B), α·A, A ⊙ R. Integer-valued: exact.
TEST_CASE_TEMPLATE("linear elementwise laws on every layout", T, float, double, std::int32_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 3 * p;
    auto law = [&]<class L>(L) {
      const Mat<T> A = testing::dense_of<L, T>(r, c, 30, p), B = testing::dense_of<L, T>(r, c, 31, p);
      const Mat<T> Rm = testing::random_int<T>(r, c, 32);
      const Mat<T> sum = A + B, diff = A - B, scaled = T(3) * A, had = A.cwiseProduct(Rm);
      auto errs = testing::per_rank<double>(p, [&](Group g) {
        auto a = testing::make_operand<L, T>(g, r, c, 30), b = testing::make_operand<L, T>(g, r, c, 31);
        double e = compare(a + b, sum).max_abs + compare(a - b, diff).max_abs + compare(T(3) * a, scaled).max_abs;
        if constexpr (std::is_same_v<L, Partial>) {
          auto h = hadamard(a, shard<Replicated>(Rm, g));  // linear in the Partial operand
          static_assert(std::is_same_v<typename decltype(h)::layout, Partial>);
          e += compare(h, had).max_abs;
        } else {
          e += compare(hadamard(a, shard<L>(Rm, g)), had).max_abs;
        }
        return e;
      });
      CHECK(max_over<T>(errs) == 0.0);
    };
    law(Replicated{});
    law(RowSharded{});
    law(ColSharded{});
    law(Partial{});
  }
}

// Non-linear maps commute with every split layout (not with Partial: E110, a compile error).
TEST_CASE_TEMPLATE("non-linear maps commute with R, Row and C", T, float, double) {
  auto gelu = [](T x) { return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2)))); };
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 2 * p;
    const Mat<T> X = testing::random_real<T>(r, c, 33);
    const Mat<T> expected = X.unaryExpr(gelu);
    auto errs = testing::per_rank<double>(p, [&](Group g) {
      return compare(map(shard<Replicated>(X, g), gelu), expected).max_abs +
             compare(map(shard<RowSharded>(X, g), gelu), expected).max_abs +
             compare(map(shard<ColSharded>(X, g), gelu), expected).max_abs;
    });
    CHECK(max_over<T>(errs) == 0.0);  // the same scalar function on the same element: bit-equal
  }
}

TEST_CASE("a non-linear map of the summands is not the map of the sum (why Partial is refused)") {
  const int p = 2;
  const Index r = 2, c = 3;
  const Mat<double> X = testing::partial_dense<double>(r, c, 34, p);
  auto sq = [](double x) { return x * x; };
  // Apply the map to each summand by hand and reduce: what a library without E110 would do.
  auto errs = testing::per_rank<double>(p, [&](Group g) {
    auto x = testing::make_operand<Partial, double>(g, r, c, 34);
    Sharded<double, Partial> wrong(x.local().unaryExpr(sq), r, c, g);
    return compare(wrong, Mat<double>(X.unaryExpr(sq))).max_abs;
  });
  CHECK(errs[0] > 0.0);
}

TEST_CASE_TEMPLATE("add_bias: b[R] on R and Row, b[C] on C", T, float, double, std::int64_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 3 * p;
    const Mat<T> X = testing::random_int<T>(r, c, 35), b = testing::random_int<T>(1, c, 36);
    Mat<T> expected = X;
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < c; ++j) expected(i, j) += b(0, j);
    auto errs = testing::per_rank<double>(p, [&](Group g) {
      auto bR = shard<Replicated>(b, g);
      return compare(add_bias(shard<Replicated>(X, g), bR), expected).max_abs +
             compare(add_bias(shard<RowSharded>(X, g), bR), expected).max_abs +
             compare(add_bias(shard<ColSharded>(X, g), shard<ColSharded>(b, g)), expected).max_abs;
    });
    CHECK(max_over<T>(errs) == 0.0);
  }
}

TEST_CASE_TEMPLATE("softmax_rows on R and Row equals the dense softmax", T, float, double) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 3 * p, c = 7;
    const Mat<T> X = testing::random_real<T>(r, c, 37) * T(4);
    Mat<T> expected(r, c);
    for (Index i = 0; i < r; ++i) {  // independent reference: plain loops, max-shifted
      T mx = X(i, 0);
      for (Index j = 1; j < c; ++j) mx = std::max(mx, X(i, j));
      T s = 0;
      for (Index j = 0; j < c; ++j) s += std::exp(X(i, j) - mx);
      for (Index j = 0; j < c; ++j) expected(i, j) = std::exp(X(i, j) - mx) / s;
    }
    const double tol = std::is_same_v<T, double> ? 1e-15 : 1e-6;
    auto errs = testing::per_rank<double>(p, [&](Group g) {
      return std::max(compare(softmax_rows(shard<Replicated>(X, g)), expected).max_rel,
                      compare(softmax_rows(shard<RowSharded>(X, g)), expected).max_rel);
    });
    CHECK(max_over<T>(errs) <= tol);
  }
}

TEST_CASE_TEMPLATE("col_sum and row_sum: Row leaves a Partial column sum, C a Partial row sum", T, float, double,
                   std::int32_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 3 * p;
    auto law = [&]<class L>(L) {
      const Mat<T> X = testing::dense_of<L, T>(r, c, 38, p);
      const Mat<T> cs = X.colwise().sum(), rs = X.rowwise().sum();
      auto errs = testing::per_rank<double>(p, [&](Group g) {
        auto x = testing::make_operand<L, T>(g, r, c, 38);
        auto a = col_sum(x);
        auto b = row_sum(x);
        static_assert(decltype(a)::layout::kind == rules::col_sum(L::kind).result);
        static_assert(decltype(b)::layout::kind == rules::row_sum(L::kind).result);
        return compare(a, cs).max_abs + compare(b, rs).max_abs;
      });
      CHECK(max_over<T>(errs) == 0.0);
    };
    law(Replicated{});
    law(RowSharded{});
    law(ColSharded{});
    law(Partial{});
  }
}
