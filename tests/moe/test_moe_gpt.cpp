// tests/moe/test_moe_gpt.cpp — a GPT with MoE blocks (moe_gpt.hpp) trains with the same loss curve at
// EP 1 and 2, ETP 2 and EP 2 × ETP 2 (threads). Its own TU: with the layer tests in one, 1.31 GB of
// compiler memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "moe_gpt.hpp"

TEST_CASE("a GPT with MoE blocks trains with the same loss curve at EP 1 and 2 (and ETP 2)") {
  constexpr int kSteps = 8;
  const auto base = moe_gpt::curve(1, 1, kSteps);
  REQUIRE(base.size() == kSteps);
  double diff = 0;
  struct Shape {
    int e, t;
  };
  for (Shape s : {Shape{2, 1}, Shape{1, 2}, Shape{2, 2}}) {
    CAPTURE(s.e);
    CAPTURE(s.t);
    const auto got = moe_gpt::curve(s.e, s.t, kSteps);
    REQUIRE(got.size() == kSteps);
    for (int i = 0; i < kSteps; ++i) {
      const double d = std::abs(got[static_cast<std::size_t>(i)] - base[static_cast<std::size_t>(i)]) /
                       std::abs(base[static_cast<std::size_t>(i)]);
      CHECK(d <= 1e-12);
      diff = std::max(diff, d);
    }
  }
  CHECK(base.back() < base.front());  // it trains
  MESSAGE("MoE GPT: loss " << base.front() << " -> " << base.back() << " in " << kSteps
                           << " steps at EP 1; largest relative difference per step at EP 2, ETP 2, EP 2 x ETP 2: " << diff);
}
