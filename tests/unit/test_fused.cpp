// The fused kernels (backend/cpu/fused.hpp) against the unfused path, bit for bit, on both ISA paths of
// backend/cpu/simd.hpp; the two ISA paths against each other; the streaming column sum against Eigen's
// colwise().sum(); the float GeLU's accuracy against double (and its distance from Eigen's tanh,
// printed). One TransformerBlock step against the same layers run unfused: test_fused_block.cpp.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "fused_support.hpp"
#include "simd_paths.hpp"

using namespace shardalg;
using testing::IsaGuard;
using testing::on_each_isa;
using fused_support::Mat, fused_support::Unfused, fused_support::random, fused_support::same_bits;

namespace {

/// Distance in units in the last place between two finite floats of the same sign or ±0.
std::int64_t ulp_distance(float a, float b) {
  auto key = [](float v) {
    const auto i = std::bit_cast<std::int32_t>(v);
    return i < 0 ? std::int64_t(std::numeric_limits<std::int32_t>::min()) - i : std::int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

/// Eigen's own column sums, the reference. Of 0 rows they are zeros, written out: Eigen's partial
/// reduction of an empty matrix offsets its null data pointer (UBSan: "applying non-zero offset
/// to null pointer").
template <class T>
Mat<T> eigen_col_sum(const Mat<T>& x) {
  if (x.rows() == 0) return Mat<T>::Zero(1, x.cols());
  return x.colwise().sum();
}

const Index shapes[][2] = {{1, 1}, {3, 7}, {5, 16}, {9, 33}, {17, 64}, {64, 130}};

}  // namespace

TEST_CASE("col_sum streams the rows in Eigen's order: Eigen's bits") {
  for (Index r : {0, 1, 2, 4, 5, 6, 9, 13, 100})
    for (Index c = 1; c <= 40; ++c) {
      CAPTURE(r);
      CAPTURE(c);
      const auto xf = random<float>(r, c, 1000.0, unsigned(r * 100 + c));
      const auto xd = random<double>(r, c, 1000.0, unsigned(r * 100 + c));
      CHECK(same_bits<float>(CpuBackend::col_sum(xf), eigen_col_sum(xf)));
      CHECK(same_bits<double>(CpuBackend::col_sum(xd), eigen_col_sum(xd)));
    }
}

TEST_CASE_TEMPLATE("col_sum and row_sum of empty blocks are zeros (a rank that holds no rows)", T, float, double,
                   std::int32_t, std::int64_t) {
  // Under ASan+UBSan (scripts/sanitize) this is where Eigen's partial reduction of an empty block
  // offset a null pointer; the expected values are written out.
  for (Index c : {0, 1, 5, 17}) {
    CAPTURE(c);
    const Mat<T> s = CpuBackend::col_sum(Mat<T>(0, c));
    REQUIRE(s.rows() == 1);
    REQUIRE(s.cols() == c);
    for (Index j = 0; j < c; ++j) CHECK(s(0, j) == T(0));
    const Mat<T> r = CpuBackend::row_sum(Mat<T>(c, 0));
    REQUIRE(r.rows() == c);
    REQUIRE(r.cols() == 1);
    for (Index i = 0; i < c; ++i) CHECK(r(i, 0) == T(0));
  }
}

TEST_CASE("simd: the AVX2 path gives the scalar path's bits") {
  IsaGuard g;
  if (simd::detail::detect() != simd::Level::avx2) return;
  // every 4099th float bit pattern (both signs, all exponents), plus edge values
  std::vector<float> x;
  for (std::uint64_t b = 0; b < (1ull << 32); b += 4099) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(b));
    if (std::isfinite(v)) x.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 86.0f, -86.0f, 88.0f, 89.0f, -90.0f, 10.0f, -10.0f, 0.5f})
    x.push_back(v);
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> a(x.size()), b(x.size());
  auto both = [&](auto fn) {
    simd::set_level(simd::Level::scalar);
    fn(x.data(), a.data(), n - 3);  // a tail that is not a whole vector
    simd::set_level(simd::Level::avx2);
    fn(x.data(), b.data(), n - 3);
    return std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(n - 3)) == 0;
  };
  CHECK(both([](const float* i, float* o, std::int64_t k) { simd::exp(i, o, k); }));
  CHECK(both([](const float* i, float* o, std::int64_t k) { simd::gelu_tanh(i, o, k); }));
  CHECK(both([](const float* i, float* o, std::int64_t k) { simd::gelu_tanh_grad(i, o, k); }));
  const std::vector<float> d(x.size(), 0.37f);
  CHECK(both([&](const float* i, float* o, std::int64_t k) { simd::gelu_grad_mul(i, d.data(), o, k); }));
  // the softmax's exponentials and their eight-lane sum: every tail length, scores of varied size
  // (a softmax row's), from a shift that puts the arguments where a softmax puts them (≤ 0) and not
  std::vector<float> scores(5000);
  for (std::size_t i = 0; i < scores.size(); ++i)
    scores[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 30.0 + std::cos(0.013 * static_cast<double>(i)) * 9.0);
  for (std::int64_t len = 1; len <= 5000; len += (len < 40 ? 1 : 517)) {
    CAPTURE(len);
    for (float shift : {0.0f, 4.5f}) {
      std::vector<float> ys = scores, yv = scores;
      simd::set_level(simd::Level::scalar);
      const float ss = simd::exp_sum(ys.data(), 0.125f, shift, len);
      simd::set_level(simd::Level::avx2);
      const float sv = simd::exp_sum(yv.data(), 0.125f, shift, len);
      CHECK(std::bit_cast<std::uint32_t>(ss) == std::bit_cast<std::uint32_t>(sv));
      CHECK(std::memcmp(ys.data(), yv.data(), sizeof(float) * static_cast<std::size_t>(len)) == 0);
    }
  }
}

TEST_CASE("simd: exp_sum is e^(x·scale − shift) in place and their sum") {
  on_each_isa([] {
    for (std::int64_t len : {std::int64_t(1), std::int64_t(5), std::int64_t(8), std::int64_t(13), std::int64_t(100)}) {
      std::vector<float> x(static_cast<std::size_t>(len));
      for (std::int64_t i = 0; i < len; ++i) x[i] = static_cast<float>((i * 37) % 23) - 11.0f;
      const std::vector<float> x0 = x;
      const float sum = simd::exp_sum(x.data(), 0.5f, 2.0f, len);
      double ref_sum = 0, worst = 0;
      for (std::int64_t i = 0; i < len; ++i) {
        const double e = std::exp(double(x0[i]) * 0.5 - 2.0);
        ref_sum += x[i];
        worst = std::max(worst, std::fabs(x[i] - e) / e);
      }
      CAPTURE(len);
      CHECK(worst < 4e-7);                                   // each exponential within ~2 ulp
      CHECK(std::fabs(sum - ref_sum) <= 1e-6 * ref_sum);     // the sum of the values written
    }
  });
}

TEST_CASE("simd: accuracy against double, and the distance from Eigen's tanh GeLU") {
  std::vector<float> x;
  for (int i = -200000; i <= 200000; ++i) x.push_back(static_cast<float>(i) * 5e-5f);  // [−10, 10]
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> e(x.size()), gl(x.size()), gd(x.size());
  simd::exp(x.data(), e.data(), n);
  simd::gelu_tanh(x.data(), gl.data(), n);
  simd::gelu_tanh_grad(x.data(), gd.data(), n);
  // exp: ulp; GeLU: ulp on [−3, 10] (below −3 the result is e^(−2u)·x with |2u| up to 87: the
  // argument's rounding alone moves it by |2u|·2⁻²⁴ relative) and the absolute error everywhere;
  // GeLU′: absolute error (it crosses zero near x = −0.75)
  std::int64_t ue = 0, ug = 0, ueig = 0;
  double ag = 0, aeig = 0, agd = 0, aeigd = 0;
  const float k = 0.7978845608028654f, c = 0.044715f;
  Eigen::ArrayXf xe = Eigen::Map<Eigen::ArrayXf>(x.data(), n);
  Eigen::ArrayXf eig = 0.5f * xe * (1.0f + (k * (xe + c * xe.cube())).tanh());  // the old float path
  Eigen::ArrayXf eigd = nn::GeluTanhGrad{}.array(xe);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[static_cast<std::size_t>(i)];
    // ½(1 + tanh u) = σ(2u), in double without the cancellation of 1 + tanh u at negative u
    const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v), sg = 1 / (1 + std::exp(-2 * u));
    const double gref = v * sg, dref = sg + 2 * v * sg * (1 - sg) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
    ue = std::max(ue, ulp_distance(e[i], static_cast<float>(std::exp(v))));
    if (v >= -3) {
      ug = std::max(ug, ulp_distance(gl[i], static_cast<float>(gref)));
      ueig = std::max(ueig, ulp_distance(eig[i], static_cast<float>(gref)));
    }
    ag = std::max(ag, std::fabs(gl[i] - gref));
    aeig = std::max(aeig, std::fabs(eig[i] - gref));
    agd = std::max(agd, std::fabs(gd[i] - dref));
    aeigd = std::max(aeigd, std::fabs(eigd[i] - dref));
  }
  std::printf("simd accuracy on [-10, 10] (%s): exp %lld ulp; gelu_tanh %lld ulp on [-3, 10], |error| <= %.2g "
              "(Eigen's tanh form, the old float path in this build: %lld ulp, %.2g); gelu_tanh' |error| <= %.2g "
              "(Eigen's: %.2g)\n",
              simd::level_name(), (long long)ue, (long long)ug, ag, (long long)ueig, aeig, agd, aeigd);
  CHECK(ue <= 2);
  CHECK(ug <= 32);
  CHECK(ag <= 2e-6);
  CHECK(agd <= 4e-6);
}

TEST_CASE_TEMPLATE("fused bias + activation and its backward: the unfused path's bits", T, float, double) {
  on_each_isa([] {
    for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf, nn::Activation::swiglu})
      for (bool bias : {false, true})
        for (const auto& s : shapes) {
          CAPTURE(static_cast<int>(act));
          CAPTURE(bias);
          CAPTURE(s[0]);
          CAPTURE(s[1]);
          const Index rows = s[0], cols = act == nn::Activation::swiglu ? 2 * s[1] : s[1];
          const Mat<T> y = random<T>(rows, cols, 4.0, 7), b = random<T>(1, cols, 1.0, 8);
          Mat<T> hf = y, hu = y;
          const Mat<T> af = nn::Fused<CpuBackend>::bias_act(hf, bias ? &b : nullptr, act);
          const Mat<T> au = nn::Fused<Unfused>::bias_act(hu, bias ? &b : nullptr, act);
          CHECK(same_bits<T>(hf, hu));
          CHECK(same_bits<T>(af, au));
          const Mat<T> da = random<T>(rows, af.cols(), 1.0, 9);
          Mat<T> dbf, dbu;
          const Mat<T> dhf = nn::Fused<CpuBackend>::act_grad(hf, Mat<T>(da), act, &dbf);
          const Mat<T> dhu = nn::Fused<Unfused>::act_grad(hu, Mat<T>(da), act, &dbu);
          CHECK(same_bits<T>(dhf, dhu));
          CHECK(same_bits<T>(dbf, dbu));
          CHECK(same_bits<T>(dbu, Mat<T>(dhu.colwise().sum())));  // the column sum is Eigen's
          if constexpr (std::is_same_v<T, double>)                // the double GeLU is the old array form
            if (act == nn::Activation::gelu_tanh) CHECK(same_bits<T>(af, Mat<T>(nn::GeluTanh{}.array(hu.array()).matrix())));
        }
  });
}

TEST_CASE_TEMPLATE("fused norms: the unfused kernels' bits", T, float, double) {
  on_each_isa([] {
  for (bool center : {true, false})
    for (const auto& s : shapes) {
      CAPTURE(center);
      CAPTURE(s[0]);
      CAPTURE(s[1]);
      const Mat<T> x = random<T>(s[0], s[1], 3.0, 11), gamma = random<T>(1, s[1], 1.0, 12), beta = random<T>(1, s[1], 1.0, 13);
      const Mat<T>* bp = center ? &beta : nullptr;
      const auto f = nn::Fused<CpuBackend>::norm_forward(x, gamma, bp, T(1e-5), center);
      const auto u = nn::Fused<Unfused>::norm_forward(x, gamma, bp, T(1e-5), center);
      CHECK(same_bits<T>(f.y, u.y));
      CHECK(same_bits<T>(f.xhat, u.xhat));
      CHECK(same_bits<T>(f.rstd, u.rstd));
      const Mat<T> dy = random<T>(s[0], s[1], 1.0, 14);
      const auto gf = nn::Fused<CpuBackend>::norm_backward(dy, f.xhat, gamma, f.rstd, center, center);
      const auto gu = nn::Fused<Unfused>::norm_backward(dy, u.xhat, gamma, u.rstd, center, center);
      CHECK(same_bits<T>(gf.dx, gu.dx));
      CHECK(same_bits<T>(gf.dgamma, gu.dgamma));
      if (center) CHECK(same_bits<T>(gf.dbeta, gu.dbeta));
      // with the residual cotangent added in the sweep: R + dX, the unfused add's bits
      const Mat<T> res = random<T>(s[0], s[1], 1.0, 15);
      const auto rf = nn::Fused<CpuBackend>::norm_backward(dy, f.xhat, gamma, f.rstd, center, center, &res);
      const auto ru = nn::Fused<Unfused>::norm_backward(dy, u.xhat, gamma, u.rstd, center, center, &res);
      CHECK(same_bits<T>(rf.dx, ru.dx));
      CHECK(same_bits<T>(rf.dx, Mat<T>(res + gu.dx)));
      CHECK(same_bits<T>(rf.dgamma, gu.dgamma));
    }
  });
}

TEST_CASE_TEMPLATE("fused dropout + residual add: the unfused path's bits", T, float, double) {
  for (double p : {0.0, 0.1, 0.5})
    for (const auto& s : shapes) {
      const Mat<T> x = random<T>(s[0], s[1], 2.0, 21), z = random<T>(s[0], s[1], 2.0, 22);
      CHECK(same_bits<T>(nn::Fused<CpuBackend>::dropout_add(x, z, p, 5, 77, 3, 4),
                         nn::Fused<Unfused>::dropout_add(x, z, p, 5, 77, 3, 4)));
    }
}
