// ad::verify with bounds in bf16: bugs injected into an MLP sub-layer's run, not into its bound
// (the same in float: test_verify_bounds_f32.cpp), and a bound that does not exist reported as a
// failing row (verify_bounds_cases.hpp).
#include "verify_bounds_cases.hpp"

using namespace vb;

TEST_CASE("ad::verify with bounds: bugs injected into the bf16 run (not its bound) fail on the tensor where they happen") {
  check_bugs<Eigen::bfloat16>();
}

TEST_CASE("ad::verify with bounds: a bound that does not exist is a failing row (bf16 LayerNorm of rows ≈ 100)") {
  // Rows of 100 + 0.01·U(−1, 1): their bf16 rounding (ulp 0.5) bounds the mean's error by far more
  // than the variance (3e-5) + ε (0.01) it divides by, so the bound of 1/√(σ² + ε) does not exist.
  ad::Named in = mlp_inputs();
  in.at("x") = (0.01 * in.at("x")).array() + 100.0;
  const auto r = ad::verify<Eigen::bfloat16>(mlp_program(Bug::none), in, {.worlds = {2}, .fd_samples = 0, .bounds = true});
  INFO(r.text());
  CHECK(!r.pass());
  REQUIRE(!r.checks.empty());
  CHECK(r.checks.front().name.rfind("(bound) precision::Running: a divisor", 0) == 0);
}
