// A thread world `world` of 4 ranks, a `seed`, `lr`, and the tokens x and their cotangent dy,
// X[ep:Row, etp:R] on an ep × etp = 2 × 2 mesh.
#include <cstdint>
#include <shardalg/shardalg.hpp>
#include <shardalg/nn/layers/moe.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(4, [&](ThreadComm& comm) {
    Group world = comm;
    const std::uint64_t seed = 7;
    const double lr = 0.1;
    Mesh m(world, {{"ep", 2}, {"etp", 2}});
    using Tok = nn::Moe<double>::Tokens;
    Tok x = nn::Moe<double>::split_tokens(shard<Replicated>(CpuBackend::matrix<double>(CpuBackend::matrix<double>::Random(16, 64)), world), m);
    Tok dy = x;
// FRAGMENT
  });
}
