// The matmul rule table as laws: for every valid pair of layouts, with and without transposed
// operands, over world sizes 1, 2, 3, 4, 8 and four element types,
//   to_dense(matmul(shard(A), shard(B))) == A · B   exactly (integer-valued operands).
// The table itself is checked against the spec (ALGEBRA.md), written out independently here.
#include <doctest/doctest.h>

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

// One law instance: stored layouts SA, SB; TA/TB say whether the operand is used transposed.
// Effective shapes: op(A) is m×k, op(B) is k×n. Returns the max abs error of every rank.
template <class T, class SA, class SB, bool TA, bool TB>
double matmul_law(int p, Index m, Index k, Index n, std::uint64_t seed) {
  constexpr K ea = TA ? transpose(SA::kind) : SA::kind;
  constexpr K eb = TB ? transpose(SB::kind) : SB::kind;
  static_assert(matmul_rule(ea, eb).valid);
  const Index ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
  Mat<T> A = testing::dense_of<SA, T>(ar, ac, seed, p);
  Mat<T> B = testing::dense_of<SB, T>(br, bc, seed + 1, p);
  Mat<T> Aeff = TA ? Mat<T>(A.transpose()) : A;
  Mat<T> Beff = TB ? Mat<T>(B.transpose()) : B;
  const Mat<T> expected = Aeff * Beff;  // the dense reference: plain Eigen on whole matrices
  auto errs = testing::per_rank<double>(p, [&](Group g) {
    auto a = testing::make_operand<SA, T>(g, ar, ac, seed);
    auto b = testing::make_operand<SB, T>(g, br, bc, seed + 1);
    auto c = [&] {
      if constexpr (TA && TB) return matmul(transpose(a), transpose(b));
      else if constexpr (TA) return matmul(transpose(a), b);
      else if constexpr (TB) return matmul(a, transpose(b));
      else return matmul(a, b);
    }();
    static_assert(decltype(c)::layout::kind == matmul_rule(ea, eb).result);
    return compare(c, expected).max_abs;
  });
  return *std::max_element(errs.begin(), errs.end());
}

// Every (stored A, stored B, transpose flags) whose effective pair is valid.
template <class T, bool TA, bool TB, class SA, class SB>
void one_pair(int p, std::uint64_t seed, int& checked) {
  constexpr K ea = TA ? transpose(SA::kind) : SA::kind;
  constexpr K eb = TB ? transpose(SB::kind) : SB::kind;
  if constexpr (matmul_rule(ea, eb).valid) {
    // Shapes: every dimension a multiple of p (sharded dims must divide), varied per seed.
    const Index m = p * (1 + seed % 3), k = p * (2 + seed % 2), n = p * (1 + (seed / 3) % 3);
    CAPTURE(p);
    CAPTURE(notation(ea));
    CAPTURE(notation(eb));
    CAPTURE(TA);
    CAPTURE(TB);
    CHECK(matmul_law<T, SA, SB, TA, TB>(p, m, k, n, seed) == 0.0);
    ++checked;
  }
}

template <class T, bool TA, bool TB>
void all_pairs(int p, std::uint64_t seed, int& checked) {
  testing::for_each_layout_pair([&]<class SA, class SB>() { one_pair<T, TA, TB, SA, SB>(p, seed, checked); });
}

}  // namespace

TEST_CASE_TEMPLATE("matmul laws over every valid layout pair, transposes and world sizes", T, float, double,
                   std::int32_t, std::int64_t) {
  int checked = 0;
  for (int p : testing::world_sizes) {
    const std::uint64_t seed = 100 + p;
    all_pairs<T, false, false>(p, seed, checked);
    all_pairs<T, true, false>(p, seed + 7, checked);
    all_pairs<T, false, true>(p, seed + 13, checked);
    all_pairs<T, true, true>(p, seed + 19, checked);
  }
  // 8 valid effective pairs (R·R, R·Row, R·C, R·Partial, Row·R, C·R, C·Row, Partial·R) × 4 transpose combinations × 5 world sizes.
  CHECK(checked == 8 * 4 * 5);
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
