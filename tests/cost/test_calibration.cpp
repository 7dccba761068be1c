// The α-β fit: exact on synthetic times, and predictive on real ThreadComm all-reduces.
#include <doctest/doctest.h>

#include <cstdio>

#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

TEST_CASE("the fit recovers alpha and beta from exact model times") {
  const cost::AlphaBeta truth{3e-6, 5e9};  // 3 µs, 5 GB/s
  for (int p : {2, 4, 8}) {
    std::vector<cost::TimingSample> s;
    for (double v : {4e3, 64e3, 1e6, 16e6}) {
      // hand form of the ring all-reduce: 2(P−1)α + 2(P−1)/P · V/β
      s.push_back({v, 2.0 * (p - 1) * 3e-6 + 2.0 * (p - 1) / p * v / 5e9});
    }
    const auto fit = cost::fit_line(s);
    const auto ab = cost::all_reduce_alpha_beta(fit, p);
    CHECK(ab.alpha_seconds == doctest::Approx(3e-6).epsilon(1e-9));
    CHECK(ab.beta_bytes_per_second == doctest::Approx(5e9).epsilon(1e-9));
  }
}

TEST_CASE("the fit keeps alpha and the slope non-negative") {
  // times that fall with size would need a negative slope: the fit is a constant instead
  const auto f = cost::fit_line({{1e3, 2e-3}, {1e6, 1e-3}});
  CHECK(f.seconds_per_byte == 0.0);
  CHECK(f.intercept_seconds > 0.0);
  // a line through the origin has no latency
  const auto g = cost::fit_line({{1e3, 1e-6}, {1e6, 1e-3}});
  CHECK(g.intercept_seconds == doctest::Approx(0.0));
  CHECK(g.seconds_per_byte == doctest::Approx(1e-9));
}

// Prediction against measurement. Fit on five sizes, predict two held-out ones (one inside the
// fitted range, one 2× beyond it), and require the prediction within a factor of 3 of the
// measured median. Why 3: the model is a straight line t = a + c·V, but ThreadComm's cost per
// byte changes as the buffers leave the caches (a factor up to ~2 between L2- and DRAM-resident
// sizes), and this machine is shared (2 cores, other builds running), which the medians of 15
// repetitions damp but do not remove. Not a speed check: nothing here depends on how fast the
// machine is, only on the times being close to a line.
TEST_CASE("ThreadComm all-reduce: the calibrated model predicts held-out sizes within 3x") {
  const int p = 2;
  const std::vector<std::size_t> fit_sizes = {1u << 12, 1u << 14, 1u << 16, 1u << 18, 1u << 20};
  const std::vector<std::size_t> held_out = {3u << 15, 1u << 21};  // 384 KiB inside, 8 MiB beyond
  const auto cal = cost::calibrate_thread_all_reduce(p, fit_sizes, 15);
  REQUIRE(cal.samples.size() == fit_sizes.size());
  std::printf("calibration on %d ThreadComm ranks: alpha = %.3g s, beta = %.3g B/s\n", p, cal.link.alpha_seconds,
              cal.link.beta_bytes_per_second);
  CHECK(cal.link.alpha_seconds >= 0.0);
  CHECK(cal.link.beta_bytes_per_second > 0.0);

  std::vector<cost::TimingSample> measured;
  shardalg::run_ranks(p, [&](shardalg::ThreadComm& c) {
    auto m = cost::measure_all_reduce(shardalg::Group(c), held_out, 15);
    if (c.rank() == 0) measured = m;
  });
  for (const auto& m : measured) {
    const double predicted = cal.all_reduce_seconds(m.dense_bytes);
    const double ratio = predicted / m.seconds;
    std::printf("  %10.0f B: measured %.3g s, predicted %.3g s, ratio %.2f\n", m.dense_bytes, m.seconds, predicted,
                ratio);
    CHECK(ratio < 3.0);
    CHECK(ratio > 1.0 / 3.0);
  }
}
