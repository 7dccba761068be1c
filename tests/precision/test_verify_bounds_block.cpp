// ad::verify with bounds: a transformer block in float (verify_bounds_cases.hpp). In bf16 its bound
// does not exist (LN2's divisor; docs/verify.md): test_verify_bounds_bugs.cpp shows such a row.
#include "verify_bounds_cases.hpp"

using namespace vb;

TEST_CASE("ad::verify with bounds: a float transformer block (LN, MHA, GeLU MLP, dropout) at P = 1, 2, 4") {
  // Worst case through a whole block: every tensor passes, most far inside (docs/verify.md).
  const auto r = ad::verify<float>(block_program, block_inputs(), {.worlds = {2, 4}, .fd_samples = 0, .bounds = true});
  INFO(r.text());
  CHECK(r.pass());
  CHECK(r.checks.size() == 3 * 14);
  MESSAGE("float block: largest error ÷ bound ", worst_of(r));
}
