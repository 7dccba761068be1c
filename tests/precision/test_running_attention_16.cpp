// The running bound through attention in bf16 and fp16 (16-bit storage, fp32 arithmetic): running_attention.hpp.
#include "running_attention.hpp"

namespace running_layers {
TEST_CASE_TEMPLATE_INVOKE(running_attention, Eigen::bfloat16, Eigen::half);
}  // namespace running_layers
