// The running bound (precision/running.hpp) — the dense twins of reference/dense_layers.hpp
// evaluated over precision::Running<f32> — against float programs that really round. This file:
// each rule holds for float arithmetic over random magnitudes and summation orders, and a dot
// product's running bound is the derived product bound of precision/bounds.hpp. The layers are in
// test_running_layers.cpp, the injected bugs in test_running_bugs.cpp.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "running_support.hpp"
#include "shardalg/precision/bounds.hpp"
#include "shardalg/precision/running.hpp"

namespace {

using namespace shardalg;
namespace pr = shardalg::precision;
using R = pr::Running<pr::Format::f32>;
using running_support::M, running_support::Pool;

}  // namespace

// ---------------------------------------------------------------------------------------------
// (1) The rules against float arithmetic
// ---------------------------------------------------------------------------------------------

TEST_CASE("running bound: sums in any order, products, and the library functions, against float") {
  std::mt19937_64 gen(7);
  double worst = 0;
  for (int k : {1, 2, 7, 64, 1000}) {
    for (double scale : {1e-2, 1.0, 1e3}) {
      std::uniform_real_distribution<double> u(-scale, scale);
      std::vector<float> x(static_cast<std::size_t>(k)), y(x.size());
      for (auto& v : x) v = static_cast<float>(u(gen));
      for (auto& v : y) v = static_cast<float>(u(gen));
      R acc = 0.0;  // an exact zero: not a term of the sum
      long double exact = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        acc += R(x[i]) * R(y[i]);
        exact += static_cast<long double>(x[i]) * y[i];
      }
      // Three orders of the same float dot product: forward, backward, pairwise.
      float fwd = 0, bwd = 0;
      for (std::size_t i = 0; i < x.size(); ++i) fwd += x[i] * y[i];
      for (std::size_t i = x.size(); i-- > 0;) bwd += x[i] * y[i];
      std::vector<float> t(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) t[i] = x[i] * y[i];
      while (t.size() > 1) {
        std::vector<float> n;
        for (std::size_t i = 0; i + 1 < t.size(); i += 2) n.push_back(t[i] + t[i + 1]);
        if (t.size() % 2) n.push_back(t.back());
        t = n;
      }
      for (float got : {fwd, bwd, t[0]}) {
        const double r = static_cast<double>(std::abs(static_cast<long double>(got) - exact)) / acc.bound();
        CHECK_MESSAGE(r <= 1.0, "k=" << k << " scale=" << scale << " ratio " << r);
        worst = std::max(worst, r);
      }
      // The same bound as the derived product bound (bounds.hpp) of the 1 × k by k × 1 product.
      M a(1, k), b(k, 1);
      for (int i = 0; i < k; ++i) a(0, i) = x[static_cast<std::size_t>(i)], b(i, 0) = y[static_cast<std::size_t>(i)];
      const double pb = pr::product_bound(a, b, {pr::Format::f32, pr::Format::f32})(0, 0);
      CHECK(acc.bound() <= 1.01 * pb);
      CHECK(acc.bound() >= 0.5 * pb);
    }
  }
  MESSAGE("dot products: worst error ÷ running bound " << worst);
  CHECK(worst >= 1e-3);  // not vacuous at k = 1

  // A composite of every rule, x carrying an error from a float product: f = tanh(x)·sqrt(x² + 1)
  // / (1 + exp(−x)) + log(2 + cosh(x)) − erfc(x), in float with the std functions.
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> ratios;
  for (int i = 0; i < 2000; ++i) {
    const float p = static_cast<float>(u(gen)), q = static_cast<float>(u(gen) / 4);
    const float xf = p * q;
    const R x = R(p) * R(q);
    const R f = tanh(x) * sqrt(x * x + R(1.0)) / (R(1.0) + exp(-x)) + log(R(2.0) + cosh(x)) - erfc(x);
    const float ff = std::tanh(xf) * std::sqrt(xf * xf + 1.0f) / (1.0f + std::exp(-xf)) + std::log(2.0f + std::cosh(xf)) -
                     std::erfc(xf);
    ratios.push_back(std::abs(static_cast<double>(ff) - f.value()) / f.bound());
  }
  const double mx = *std::max_element(ratios.begin(), ratios.end());
  MESSAGE("composite of every rule: max error ÷ bound " << mx << ", median " << Pool::median(ratios));
  CHECK(mx <= 1.0);
  CHECK(Pool::median(ratios) >= 1e-3);
}

TEST_CASE("running bound: a constant the format cannot hold is rounded; a divisor or log argument "
          "within its own error is a PrecisionError naming the values") {
  CHECK(R(0.5).bound() == 0.0);
  CHECK(R(0.1).bound() == doctest::Approx(0.1 * R::u));
  CHECK(pr::Running<pr::Format::f64>(0.1).bound() == 0.0);
  const R shaky = R::with_error(1.0, 2.0);
  CHECK_THROWS_WITH_AS(R(1.0) / shaky, "precision::Running: a divisor 1 whose error bound 2 is not below its magnitude",
                       pr::PrecisionError);
  CHECK_THROWS_WITH_AS(log(shaky), "precision::Running: log of 1 whose error bound 2 is not below it", pr::PrecisionError);
  // Scaling by a power of two is exact and keeps a sum open.
  const R s = R(1.0) + R(2.0) + R(3.0);
  CHECK((s * R(0.5)).terms() == 3);
  CHECK((s * R(0.5)).bound() == doctest::Approx(0.5 * s.bound()));
  // Rounding to bf16 storage adds u(bf16)·|v| (η aside).
  CHECK(pr::round_to(R(1.0), pr::Format::bf16).bound() == doctest::Approx(std::ldexp(1.0, -8)));
}
