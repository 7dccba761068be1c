// A `world` of 4 ranks, a GptConfig `cfg`, the global batch `tokens`, `targets` and an optimizer
// `adam`, for nn::DataParallelGpt on a mesh.
#include <cstdint>
#include <vector>
#include <shardalg/nn.hpp>
#include <shardalg/nn/models/data_parallel.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(4, [&](ThreadComm& comm) {
    Group world = comm;
    nn::GptConfig cfg;
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(cfg.tokens())), targets = tokens;
    nn::Adam<double> adam;
// FRAGMENT
  });
}
