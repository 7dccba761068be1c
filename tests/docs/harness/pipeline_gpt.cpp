// A `world` of 8 ranks, a GptConfig `cfg` (4 layers), this replica's batch `x`, `y` (whole
// sequences), `m` micro-batches and the global batch's counted targets `n`, for nn::PipelineGpt.
#include <cstdint>
#include <vector>
#include <shardalg/nn.hpp>
#include <shardalg/nn/models/pipeline_gpt.hpp>
#include <shardalg/pipeline/executor.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(8, [&](ThreadComm& comm) {
    Group world = comm;
    nn::GptConfig cfg;
    cfg.layers = 4;
    const int m = 4;
    std::vector<std::int64_t> x(static_cast<std::size_t>(cfg.tokens())), y = x;
    const Index n = static_cast<Index>(y.size());
// FRAGMENT
  });
}
