// ad::verify with bounds: the op program in float, and the four bugs of test_verify_bounds_bugs.cpp
// in a float run (verify_bounds_cases.hpp; one element type per TU, each under 1 GB of compiler
// memory).
#include "verify_bounds_cases.hpp"

using namespace vb;

TEST_CASE("ad::verify with bounds: the op program at P = 1, 2, 3, 4 in float") {
  check_op_program<float>();
}

TEST_CASE("ad::verify with bounds: bugs injected into the float run (not its bound) fail on the tensor where they happen") {
  check_bugs<float>();
}
