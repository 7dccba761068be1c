// backend/cpu/simd_rows.hpp: the float row kernels of the norms and the attention backward.
//   * both ISA paths against a loop written here from the header's text (eight lanes, lane l takes
//     the elements l, l + 8, …; the lanes combined as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))),
//     bit for bit, at every length 0–40 and past several vector boundaries, on values of mixed
//     magnitude (where a different order gives different bits);
//   * integer-valued rows: the exact sums;
//   * against double: each result within its rounding bound;
//   * the float norm kernels of Kernels<CpuBackend> give the same bits on both paths.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <shardalg/nn.hpp>

#include "simd_paths.hpp"
#include <vector>

using namespace shardalg;
using testing::IsaGuard;
using testing::on_each_isa;

namespace {

/// A float the compiler must round and store (no contraction into a neighbouring add).
float rounded(float v) {
  volatile float t = v;
  return t;
}
/// The eight lanes combined in the header's order.
float combine(const float* l) {
  const float t0 = rounded(l[0] + l[4]), t1 = rounded(l[1] + l[5]), t2 = rounded(l[2] + l[6]), t3 = rounded(l[3] + l[7]);
  return rounded(rounded(t0 + t2) + rounded(t1 + t3));
}
// ---- the references, from the header's text ----
float ref_sum(const std::vector<float>& x, std::int64_t n) {
  float l[8] = {};
  for (std::int64_t i = 0; i < n; ++i) l[i % 8] = rounded(l[i % 8] + x[i]);
  return combine(l);
}
float ref_sum_sq_dev(const std::vector<float>& x, float m, std::int64_t n) {
  float l[8] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = rounded(x[i] - m);
    l[i % 8] = std::fma(d, d, l[i % 8]);
  }
  return combine(l);
}
float ref_dot(const std::vector<float>& a, const std::vector<float>& b, std::int64_t n) {
  float l[8] = {};
  for (std::int64_t i = 0; i < n; ++i) l[i % 8] = std::fma(a[i], b[i], l[i % 8]);
  return combine(l);
}

std::uint32_t bits(float v) { return std::bit_cast<std::uint32_t>(v); }

/// Values of mixed sign and magnitude (2^-12 … 2^12): sums of them depend on their order.
std::vector<float> mixed(std::size_t n, unsigned seed) {
  std::vector<float> x(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    const int e = static_cast<int>((s >> 3) % 25) - 12;
    v = static_cast<float>(std::ldexp(2.0 * u - 1.0, e));
  }
  return x;
}


std::vector<std::int64_t> lengths() {
  std::vector<std::int64_t> n;
  for (std::int64_t k = 0; k <= 40; ++k) n.push_back(k);
  for (std::int64_t k : {63, 64, 65, 127, 1000, 1024, 1031, 4099}) n.push_back(k);
  return n;
}

}  // namespace

TEST_CASE("simd rows: the reductions in the fixed eight-lane order, bit for bit, on both paths") {
  int checked = 0;
  on_each_isa([&] {
    for (std::int64_t n : lengths()) {
      CAPTURE(n);
      const auto x = mixed(static_cast<std::size_t>(n), 1), y = mixed(static_cast<std::size_t>(n), 2);
      const auto gamma = mixed(static_cast<std::size_t>(n), 3);
      const float m = n ? x[0] * 0.37f : 0.5f;
      CHECK(bits(simd::sum(x.data(), n)) == bits(ref_sum(x, n)));
      CHECK(bits(simd::sum_sq_dev(x.data(), m, n)) == bits(ref_sum_sq_dev(x, m, n)));
      CHECK(bits(simd::dot(x.data(), y.data(), n)) == bits(ref_dot(x, y, n)));
      // (Σ g, Σ g·x̂), g = dy·γ rounded
      std::vector<float> g(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) g[i] = rounded(x[i] * gamma[i]);
      float s0 = -1, s1 = -1;
      simd::norm_grad_sums(x.data(), gamma.data(), y.data(), n, s0, s1);
      CHECK(bits(s0) == bits(ref_sum(g, n)));
      CHECK(bits(s1) == bits(ref_dot(g, y, n)));
      ++checked;
    }
  });
  CHECK(checked >= static_cast<int>(lengths().size()));
}

TEST_CASE("simd rows: the elementwise row kernels, bit for bit, on both paths") {
  on_each_isa([] {
    for (std::int64_t n : lengths()) {
      CAPTURE(n);
      const auto N = static_cast<std::size_t>(n);
      const auto x = mixed(N, 4), gamma = mixed(N, 5), beta = mixed(N, 6), dy = mixed(N, 7), r = mixed(N, 8);
      const float m = 0.125f, rstd = 1.7f, mg = -0.03125f, mgx = 0.4f;
      for (bool with_beta : {false, true}) {
        std::vector<float> xh(N, -7.0f), yv(N, -7.0f);
        simd::norm_row(x.data(), m, rstd, gamma.data(), with_beta ? beta.data() : nullptr, xh.data(), yv.data(), n);
        for (std::int64_t i = 0; i < n; ++i) {
          const float e = rounded(rounded(x[i] - m) * rstd);
          REQUIRE(bits(xh[i]) == bits(e));
          REQUIRE(bits(yv[i]) == bits(with_beta ? std::fma(e, gamma[i], beta[i]) : rounded(e * gamma[i])));
        }
      }
      for (bool with_r : {false, true}) {
        std::vector<float> dx(N, -7.0f);
        simd::norm_grad_row(dy.data(), gamma.data(), x.data(), mg, mgx, rstd, with_r ? r.data() : nullptr, dx.data(), n);
        for (std::int64_t i = 0; i < n; ++i) {
          const float g = rounded(dy[i] * gamma[i]);
          const float v = rounded(std::fma(-x[i], mgx, rounded(g - mg)) * rstd);
          REQUIRE(bits(dx[i]) == bits(with_r ? rounded(r[i] + v) : v));
        }
      }
    }
  });
}

TEST_CASE("simd rows: integer-valued rows sum exactly") {
  on_each_isa([] {
    for (std::int64_t n : {std::int64_t(1), std::int64_t(7), std::int64_t(33), std::int64_t(1000)}) {
      std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
      std::int64_t sa = 0, sab = 0, sdev = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t ai = (i * 37) % 23 - 11, bi = (i * 11) % 7 - 3;
        a[i] = static_cast<float>(ai);
        b[i] = static_cast<float>(bi);
        sa += ai;
        sab += ai * bi;
        sdev += (ai - 2) * (ai - 2);
      }
      CAPTURE(n);
      CHECK(simd::sum(a.data(), n) == static_cast<float>(sa));
      CHECK(simd::dot(a.data(), b.data(), n) == static_cast<float>(sab));
      CHECK(simd::sum_sq_dev(a.data(), 2.0f, n) == static_cast<float>(sdev));
    }
  });
}

TEST_CASE("simd rows: within the rounding bound of the double result") {
  on_each_isa([] {
    for (std::int64_t n : {std::int64_t(17), std::int64_t(1024), std::int64_t(4099)}) {
      CAPTURE(n);
      const auto x = mixed(static_cast<std::size_t>(n), 9), y = mixed(static_cast<std::size_t>(n), 10);
      double s = 0, sabs = 0, d = 0, dabs = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        s += x[i];
        sabs += std::fabs(x[i]);
        d += double(x[i]) * y[i];
        dabs += std::fabs(double(x[i]) * y[i]);
      }
      // a sum of n terms in lanes of n/8 then a tree of 3: error ≤ (n/8 + 3)·u·Σ|terms|, u = 2⁻²⁴
      const double bound = (double(n) / 8 + 4) * std::ldexp(1.0, -24);
      CHECK(std::fabs(simd::sum(x.data(), n) - s) <= bound * sabs);
      CHECK(std::fabs(simd::dot(x.data(), y.data(), n) - d) <= bound * dabs);
    }
  });
}

TEST_CASE("simd rows: a float LayerNorm and its backward have the same bits on both paths") {
  IsaGuard guard;
  if (simd::detail::detect() != simd::Level::avx2) return;
  using K = nn::Kernels<CpuBackend>;
  using Mf = CpuBackend::matrix<float>;
  std::srand(41);
  const Mf x = Mf::Random(37, 1029) * 3.0f, gamma = Mf::Random(1, 1029), beta = Mf::Random(1, 1029);
  const Mf dy = Mf::Random(37, 1029);
  auto run = [&](simd::Level l) {
    simd::set_level(l);
    const auto o = K::norm_apply(x, K::row_mean_var(x, true), gamma, &beta, 1e-5f);
    const Mf dx = K::norm_grad_apply(dy, o.xhat, gamma, o.rstd, K::norm_grad_sums(dy, o.xhat, gamma), x.cols(), true);
    return std::vector<Mf>{o.y, o.xhat, o.rstd, dx};
  };
  const auto a = run(simd::Level::scalar), b = run(simd::Level::avx2);
  for (std::size_t k = 0; k < a.size(); ++k) {
    CAPTURE(k);
    REQUIRE(a[k].size() == b[k].size());
    CHECK(std::memcmp(a[k].data(), b[k].data(), sizeof(float) * static_cast<std::size_t>(a[k].size())) == 0);
  }
  // and close to a double LayerNorm computed here (rows of 1029: mean and variance to ~1e-6)
  double worst = 0;
  for (Index i = 0; i < x.rows(); ++i) {
    double mean = 0, var = 0;
    for (Index j = 0; j < x.cols(); ++j) mean += x(i, j);
    mean /= double(x.cols());
    for (Index j = 0; j < x.cols(); ++j) var += (x(i, j) - mean) * (x(i, j) - mean);
    var /= double(x.cols());
    for (Index j = 0; j < x.cols(); ++j) {
      const double y = (x(i, j) - mean) / std::sqrt(var + 1e-5) * gamma(0, j) + beta(0, j);
      worst = std::max(worst, std::fabs(y - a[0](i, j)));
    }
  }
  CHECK(worst < 2e-6);
}
