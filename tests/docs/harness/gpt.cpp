// A group `group` and one batch of `tokens` and `targets` (std::int64_t) for nn::Gpt.
#include <cstdint>
#include <vector>
#include <shardalg/nn.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    Group group = comm;
    std::vector<std::int64_t> tokens(4 * 32), targets(4 * 32);
// FRAGMENT
  });
}
