// The running bound through attention in float: running_attention.hpp.
#include "running_attention.hpp"

namespace running_layers {
TEST_CASE_TEMPLATE_INVOKE(running_attention, float);
}  // namespace running_layers
