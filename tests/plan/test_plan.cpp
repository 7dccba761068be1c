// matmul<To> as a law on thread ranks (P = 1, 2, 3, 4, 8): every (A, B, To) with and without
// transposes, in double; value bit-exact against the dense product, the ledger equal to the plan,
// the adjoint exact. In float, redistribute<To> and the planner's pick against a brute-force
// search: test_plan_search.cpp (one TU each, to stay under 1 GB of compiler memory).
#include <doctest/doctest.h>

#include "plan_cases.hpp"

using namespace shardalg;
using namespace plan_cases;

TEST_CASE("matmul<To>: every (A, B, To), value = dense, ledger = plan, adjoint exact (double)") {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    on_ranks(p, [&](Group g, Ledger& l, Report& rep) {
      all_matmul_cases<double, false, false>(g, l, 100 + p, rep);
      all_matmul_cases<double, true, false>(g, l, 200 + p, rep);
      all_matmul_cases<double, false, true>(g, l, 300 + p, rep);
      all_matmul_cases<double, true, true>(g, l, 400 + p, rep);
    });
  }
}
