// The derived bounds of precision/bounds.hpp against computations that really round: each op is
// computed here in its storage format (float, Eigen::bfloat16, Eigen::half, double) with the
// accumulation the op declares, and compared with a reference computed independently in a wider
// format (double for the float, bf16 and fp16 ops: products of two floats are exact in double and
// a double sum's error is below 2^−29 of any float bound; long double, 64 significand bits, for
// the double ops: its own error is below 2^−11 of the bound). For every op, over shapes, scales,
// sign patterns and seeds:
//   (1) the bound holds: max error/bound ≤ 1 over every element;
//   (2) it is not vacuous: the median of error/bound (pooled over the elements of all cases) is
//       at least the figure stated per op below (the measured figures are in the comments and in
//       docs/verify.md, "Derived bounds: error ÷ bound");
//   (3) it can fail: a computation with an injected bug (a product with a term dropped, a sum in a
//       narrower format than declared, a mean missing a term, a GeLU without its cubic term)
//       exceeds the bound by far.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lowp.hpp"

using namespace lowp;

namespace {

// ---------------------------------------------------------------------------------------------
// Product C = A·B: stored S, products and sums in Acc, C rounded once to S.
// ---------------------------------------------------------------------------------------------

enum class ProductBug { none, drop_last_term, accumulate_in_bf16 };

template <class S, class Acc>
Mat product_lowp(const Mat& A, const Mat& B, ProductBug bug = ProductBug::none) {
  Mat C(A.rows(), B.cols());
  const Eigen::Index k = A.cols(), kk = bug == ProductBug::drop_last_term ? k - 1 : k;
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      Acc s = 0;
      for (Eigen::Index l = 0; l < kk; ++l) {
        s += static_cast<Acc>(A(i, l)) * static_cast<Acc>(B(l, j));
        if (bug == ProductBug::accumulate_in_bf16) s = static_cast<Acc>(static_cast<float>(Eigen::bfloat16(static_cast<float>(s))));
      }
      C(i, j) = to_storage<S>(s);
    }
  return C;
}
template <class R>
RMat<R> product_ref(const Mat& A, const Mat& B) {
  RMat<R> C(A.rows(), B.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      R s = 0;
      for (Eigen::Index l = 0; l < A.cols(); ++l) s += static_cast<R>(A(i, l)) * static_cast<R>(B(l, j));
      C(i, j) = s;
    }
  return C;
}

template <class S, class Acc>
Tally product_cases(double scale_hi, ProductBug bug = ProductBug::none) {
  const Types t{sp::format_of<S>, sp::format_of<Acc>};
  Tally tally{std::string("product ") + std::string(sp::to_string(t.storage)) + "/" + std::string(sp::to_string(t.accumulate))};
  const Eigen::Index ks[] = {1, 2, 3, 7, 16, 64, 255, 1024, 4096};
  std::uint64_t seed = 11;
  for (Eigen::Index k : ks)
    for (Signs s : {Signs::mixed, Signs::positive, Signs::wide})
      for (double scale : {scale_hi / 64, scale_hi}) {
        if (bug == ProductBug::drop_last_term && k == 1) continue;
        const Eigen::Index m = k >= 1024 ? 3 : 7, n = k >= 1024 ? 4 : 6;
        const double sc = s == Signs::wide ? scale / 64 : scale;  // wide spans 2^±6 around sc
        const Mat A = random_stored<S>(m, k, sc, s, ++seed), B = random_stored<S>(k, n, sc, s, ++seed);
        const Mat C = product_lowp<S, Acc>(A, B, bug);
        const RMat<Ref<Acc>> exact = product_ref<Ref<Acc>>(A, B);
        tally.add(sp::error_ratios(C, exact, sp::product_bound(A, B, t)));
      }
  return tally;
}

/// The next value of a 16-bit type above 1, minus 1.
template <class T>
double gap_above_one() {
  const auto one = Eigen::numext::bit_cast<std::uint16_t>(T(1.0f));
  return dbl(Eigen::numext::bit_cast<T>(static_cast<std::uint16_t>(one + 1))) - 1.0;
}

}  // namespace

TEST_CASE("unit roundoff and γ_k") {
  CHECK(sp::unit_roundoff(Format::f64) == std::ldexp(1.0, -53));
  CHECK(sp::unit_roundoff(Format::f32) == std::ldexp(1.0, -24));
  CHECK(sp::unit_roundoff(Format::f16) == std::ldexp(1.0, -11));
  CHECK(sp::unit_roundoff(Format::bf16) == std::ldexp(1.0, -8));
  // u is half the gap above 1 (numeric_limits' epsilon), for the C++ types that have one.
  CHECK(sp::unit_roundoff_v<double> == std::numeric_limits<double>::epsilon() / 2);
  CHECK(sp::unit_roundoff_v<float> == std::numeric_limits<float>::epsilon() / 2);
  // For the 16-bit types, the gap above 1 from the bit patterns (Eigen 3.4's
  // numeric_limits<Eigen::half>::epsilon() is 2^−13, not the gap 2^−10).
  CHECK(sp::unit_roundoff_v<Eigen::bfloat16> == gap_above_one<Eigen::bfloat16>() / 2);
  CHECK(sp::unit_roundoff_v<Eigen::half> == gap_above_one<Eigen::half>() / 2);
  CHECK(sp::underflow_unit(Format::f16) == std::ldexp(1.0, -25));
  CHECK(sp::Types{Format::f32, Format::f32}.eta_out() == 0.0);
  CHECK(sp::gamma(0, 0.25) == 0.0);
  CHECK(sp::gamma(2, 0.25) == doctest::Approx(1.0));  // 0.5 / 0.5
  CHECK(sp::gamma(3, Format::bf16) == doctest::Approx(3.0 / 253.0));
  CHECK_THROWS_AS(sp::gamma(256, Format::bf16), sp::PrecisionError);  // k·u = 1
  CHECK_THROWS_AS(sp::gamma(4096, Format::bf16), shardalg::Error);
  CHECK_THROWS_WITH_AS(sp::gamma(300, 1.0 / 256), doctest::Contains("k = 300"), sp::PrecisionError);
  CHECK_THROWS_AS(sp::format_of_dtype(shardalg::DType::i32), sp::PrecisionError);
  CHECK(sp::Types{Format::f32, Format::f32}.u_out() == 0.0);
  CHECK(sp::Types{Format::bf16, Format::f32}.u_out() == std::ldexp(1.0, -8));
}

TEST_CASE("error_over_bound: 0/0 is 0, error over a zero bound is infinite") {
  Mat c(1, 3), e(1, 3), b(1, 3);
  c << 1.0, 2.0, 3.5;
  e << 1.0, 2.0, 3.0;
  b << 0.0, 1.0, 1.0;
  CHECK(sp::error_over_bound(c, e, b) == 0.5);
  c(0, 0) = 1.5;
  CHECK(sp::error_over_bound(c, e, b) == std::numeric_limits<double>::infinity());
  c(0, 0) = std::nan("");
  CHECK(sp::error_over_bound(c, e, b) == std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS(sp::error_over_bound(c, Mat(2, 3), b), shardalg::ShapeError);
}

// Measured (GCC 12, -O1, x86-64; the tallies pool every element of the 54 cases of each type):
//   product f32/f32    median 0.037  max 0.93
//   product bf16/f32   median 0.35   max 0.97
//   product f16/f32    median 0.30   max 0.98
//   product f64/f64    median 0.038  max 0.89
// The 16-bit storage types are dominated by the one rounding of the output (u_out·|C|), so the
// bound is tight. The fp32 and fp64 ratios fall as k grows (k = 1: about 0.35; k = 4096: about
// 1e-4 with mixed signs): γ_k counts k roundings at their worst, a random walk of them adds far
// less. Mutations (next test): a dropped term f32 max 8.4e6, bf16 3.9e4; a sum rounded to bf16
// after each add while f32 is declared 6.1e4.
TEST_CASE("product: the bound holds and is not vacuous") {
  std::vector<Tally> all = {product_cases<float, float>(4.0), product_cases<Eigen::bfloat16, float>(4.0),
                            product_cases<Eigen::half, float>(1.0), product_cases<double, double>(4.0)};
  std::printf("product, error/bound:\n");
  for (const auto& t : all) {
    t.print();
    CAPTURE(t.name);
    CHECK(t.max <= 1.0);
    CHECK(t.median() >= 1e-3);
  }
}

TEST_CASE("product: a dropped term or a narrower accumulation exceeds the bound") {
  const Tally drop = product_cases<float, float>(4.0, ProductBug::drop_last_term);
  const Tally drop16 = product_cases<Eigen::bfloat16, float>(4.0, ProductBug::drop_last_term);
  const Tally narrow = product_cases<float, float>(4.0, ProductBug::accumulate_in_bf16);
  std::printf("product mutations: drop f32 max %.3g, drop bf16 max %.3g, bf16 accumulation declared f32 max %.3g\n",
              drop.max, drop16.max, narrow.max);
  CHECK(drop.max > 100.0);
  CHECK(drop16.max > 10.0);
  CHECK(narrow.max > 100.0);
}

// ---------------------------------------------------------------------------------------------
// Sum of P partials in rank order (an all_reduce's arithmetic).
// ---------------------------------------------------------------------------------------------

namespace {

/// Σ partials in order 0..P−1. once: the running sum in Acc, rounded to S at the end; each_add:
/// every add formed in Acc and rounded to S (ThreadComm's 16-bit reduction). `Narrow` (when not
/// void) replaces S in each_add: the injected bug of a narrower sum than declared.
template <class S, class Acc, class Narrow = S>
Mat sum_lowp(const std::vector<Mat>& xs, sp::SumRounding r) {
  Mat out(xs[0].rows(), xs[0].cols());
  for (Eigen::Index i = 0; i < out.size(); ++i) {
    Acc s = static_cast<Acc>(xs[0](i));
    for (std::size_t p = 1; p < xs.size(); ++p) {
      s = s + static_cast<Acc>(xs[p](i));
      if (r == sp::SumRounding::each_add) s = static_cast<Acc>(dbl(static_cast<Narrow>(s)));
    }
    out(i) = to_storage<S>(s);
  }
  return out;
}

template <class S, class Acc, class Narrow = S>
Tally sum_cases(sp::SumRounding r, Types declared) {
  Tally tally{std::string("sum ") + (r == sp::SumRounding::once ? "once " : "each_add ") +
              std::string(sp::to_string(declared.storage)) + "/" + std::string(sp::to_string(declared.accumulate))};
  std::uint64_t seed = 101;
  for (int P : {1, 2, 3, 4, 8, 16, 64})
    for (Signs s : {Signs::mixed, Signs::positive, Signs::wide}) {
      std::vector<Mat> xs;
      for (int p = 0; p < P; ++p) xs.push_back(random_stored<S>(16, 16, s == Signs::wide ? 1.0 / 64 : 1.0, s, ++seed));
      RMat<Ref<Acc>> exact = RMat<Ref<Acc>>::Zero(16, 16);
      for (const auto& x : xs) exact += x.cast<Ref<Acc>>();
      tally.add(sp::error_ratios(sum_lowp<S, Acc, Narrow>(xs, r), exact, sp::partial_sum_bound(xs, declared, r)));
    }
  return tally;
}

}  // namespace

// Measured: once f32/f32 median 0.026 max 0.999; once bf16/f32 0.27, 0.996; each_add bf16/f32
// 0.022, 0.96; each_add f16/f32 0.025, 0.99; once f64/f64 0.0067, 0.994. P = 1 contributes zeros
// (the sum is one stored value, exact): 1/7 of each pool. Mutation: adds rounded to bf16 while
// f32 is declared, max 5.9e4.
TEST_CASE("sum of P partials: the bound holds and is not vacuous") {
  using sp::SumRounding;
  std::vector<Tally> all = {
      sum_cases<float, float>(SumRounding::once, {Format::f32, Format::f32}),
      sum_cases<Eigen::bfloat16, float>(SumRounding::once, {Format::bf16, Format::f32}),
      sum_cases<Eigen::bfloat16, float>(SumRounding::each_add, {Format::bf16, Format::f32}),
      sum_cases<Eigen::half, float>(SumRounding::each_add, {Format::f16, Format::f32}),
      sum_cases<double, double>(SumRounding::once, {Format::f64, Format::f64}),
  };
  std::printf("sum of P partials, error/bound:\n");
  for (const auto& t : all) {
    t.print();
    CAPTURE(t.name);
    CHECK(t.max <= 1.0);
    CHECK(t.median() >= 1e-3);
  }
}

TEST_CASE("sum of P partials: adds rounded to bf16 exceed a bound declared fp32") {
  const Tally bug = sum_cases<float, float, Eigen::bfloat16>(sp::SumRounding::each_add, {Format::f32, Format::f32});
  std::printf("sum mutation: each add rounded to bf16, declared f32: max %.3g\n", bug.max);
  CHECK(bug.max > 1000.0);
}
