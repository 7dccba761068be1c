// ad::verify with derived bounds: a differentiable program run in double, float, bf16 and fp16 at
// P = 1, 2, 3, 4 on threads, every element of every output and gradient against its exact value,
// error ÷ the bound of the same program evaluated over precision::bound_of<T> (precision/
// element.hpp) at the same world size. This TU: each Stored operation against Eigen's 16-bit
// arithmetic, the example of docs/verify.md, the typed errors' texts. The op program at every type
// with no vacuous tensor: test_verify_bounds_{f64,f32,bf16,f16}.cpp; a float transformer block and
// a bf16 block whose bound does not exist: test_verify_bounds_block.cpp; four bugs injected into the
// run (not into the bound): test_verify_bounds_bugs.cpp.
#include <random>
#include <stdexcept>

#include "verify_bounds_cases.hpp"

using namespace vb;

TEST_CASE("precision::Stored: each operation within its bound of Eigen's 16-bit arithmetic, and not vacuous") {
  using SB = pr::Stored<pr::Format::bf16, pr::Format::f32>;
  using SH = pr::Stored<pr::Format::f16, pr::Format::f32>;
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  auto run = [&]<class S, class H>() {
    std::vector<double> ratios;
    auto check = [&](const S& s, H h, const char* what) {
      const double e = std::abs(static_cast<double>(static_cast<float>(h)) - s.value());
      REQUIRE_MESSAGE(e <= s.bound(), what, ": error ", e, " > bound ", s.bound());
      if (s.bound() > 0) ratios.push_back(e / s.bound());
    };
    for (int i = 0; i < 2000; ++i) {
      const double a = u(gen), c = u(gen);
      const H ha(static_cast<float>(a)), hc(static_cast<float>(c));
      const S sa(a), sc(c);
      check(sa, ha, "a constant");
      check(sa + sc, ha + hc, "+");
      check(sa - sc, ha - hc, "−");
      check(sa * sc, ha * hc, "×");
      check(sa / sc, ha / hc, "÷");
      check(sqrt(abs(sa)), H(std::sqrt(static_cast<float>(Eigen::numext::abs(ha)))), "√");
      check(exp(sa), H(std::exp(static_cast<float>(ha))), "exp");
      check(tanh(sa), H(std::tanh(static_cast<float>(ha))), "tanh");
      check(erf(sa), H(std::erf(static_cast<float>(ha))), "erf");
    }
    std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2), ratios.end());
    MESSAGE("median error ÷ bound: ", ratios[ratios.size() / 2]);
    CHECK(ratios[ratios.size() / 2] >= 1e-3);
  };
  run.template operator()<SB, Eigen::bfloat16>();
  run.template operator()<SH, Eigen::half>();
  // Held exactly: no bound. Rounded: u_S·|c| (plus the subnormal unit).
  CHECK(SB(0.5).bound() == 0.0);
  CHECK(SB(0.1).bound() > 0.0);
  // 0.1 to f32, then to bf16 (Eigen's double → bfloat16 goes through float as well)
  CHECK(SB(0.1).bound() <= (SB::u + 2 * pr::unit_roundoff(pr::Format::f32)) * 0.1 + 1e-40);
  CHECK(SB(0.1 + 0.0).value() == 0.1);  // the value stays exact
}

TEST_CASE("ad::verify with bounds: the example of docs/verify.md") {
  const ad::Named in{{"x", rnd(8, 12, 61)}, {"w", rnd(12, 16, 62)}};
  auto program = [](auto& b) {  // generic in its builder
    auto x = b.template input<RowSharded>("x");
    auto w = b.template input<ColSharded>("w");
    b.output("y", ad::map(ad::matmul(ad::all_gather(x), w), ad::gelu));
  };
  const auto r = ad::verify<Eigen::bfloat16>(program, in, {.worlds = {2, 4}, .bounds = true});
  MESSAGE(r.text());  // per output and gradient: the largest and the median error ÷ bound
  CHECK(r.pass());
  CHECK(r.checks.size() == 3 * 3);  // y, d x, d w at P = 1, 2, 4
}

TEST_CASE("ad::verify with bounds: the typed errors") {
  // A program written for one builder cannot run over the bound's element.
  auto fixed = [](ad::Builder<float>& b) { b.output("x", b.input<Replicated>("x")); };
  const ad::Named in{{"x", rnd(4, 4, 1)}};
  CHECK_THROWS_WITH_AS(ad::verify<float>(fixed, in, {.bounds = true}),
                       "ad::verify: bounds run the program over a running bound's element too; write it generic in its "
                       "builder: [](auto& b) { … }",
                       ad::AutodiffError);
  // A bound element reduces on thread ranks only.
  CHECK_THROWS_WITH_AS(dispatch_host(DType::bound_bf16, []<class T>() { return 0; }),
                       "shardalg: bound<bf16> (a running bound's element) is reduced by ThreadComm only",
                       std::invalid_argument);
  CHECK(to_string(dtype_of<pr::bound_of<Eigen::half>>) == "bound<f16>");
  CHECK(size_of(DType::bound_f64) == sizeof(pr::Running<pr::Format::f64>));
}
