// Property test (issue 14): 10,000 random programs — sequences of redistributions, local and
// planned products (transposed views included), elementwise ops and every collective, on thread
// worlds of 1, 2, 3, 4 and 8 ranks, in f64, f32, i32 and i64 — each step checked bit for bit
// against an independent dense Eigen computation (tests/support/fuzz_programs.hpp). The same
// generator runs for as long as asked in the fuzz driver, tests/fuzz/fuzz_programs.cpp; a
// finding prints the seed that replays it there (--p P --replay SEED).
#include <doctest/doctest.h>

#include <utility>

#define FUZZ_TYPES_COMPILED_APART  // in fuzz_types_f64.cpp, fuzz_types_f32.cpp, fuzz_types_int.cpp
#include "fuzz_programs.hpp"

TEST_CASE("property: 10,000 random programs, every step bitwise equal to the dense computation") {
  constexpr std::uint64_t kSeed = 20261123;
  constexpr int kMaxSteps = 6;
  // Programs per world size: fewer where a collective costs more (8 threads on few cores).
  const std::pair<int, long> plan[] = {{1, 1500}, {2, 2500}, {3, 2000}, {4, 2500}, {8, 1500}};
  long programs = 0, steps = 0;
  std::size_t findings = 0;
  for (const auto& pc : plan) {
    const auto res = fuzz::run_batch(pc.first, kSeed, 0, pc.second, kMaxSteps);
    programs += res.programs;
    steps += res.steps;
    findings += res.findings.size();
    for (std::size_t i = 0; i < res.findings.size() && i < 5; ++i) {
      const auto& f = res.findings[i];
      FAIL_CHECK("P=" << f.p << " program seed " << f.pseed << ": " << f.what << "\n  " << f.trace);
    }
  }
  MESSAGE(programs << " programs, " << steps << " steps, " << findings << " findings");
  CHECK(programs >= 10000);
  CHECK(findings == 0);
}
