// ad::verify with bounds: the op program in fp16 (verify_bounds_cases.hpp; one element type per TU,
// each under 1 GB of compiler memory).
#include "verify_bounds_cases.hpp"

using namespace vb;

TEST_CASE("ad::verify with bounds: the op program at P = 1, 2, 3, 4 in fp16") {
  check_op_program<Eigen::half>();
}
