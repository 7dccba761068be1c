// A layer of the nn:: family on R input: `layer`, its input `x`, its output's cotangent `dy`, `lr`.
#include <shardalg/nn.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    Group g = comm;
    using M = CpuBackend::matrix<double>;
    auto layer = nn::Mlp<double>::init({8, 32, nn::Activation::gelu_tanh, true}, g, {});
    auto x = shard<Replicated>(M(M::Random(16, 8)), g);
    auto dy = shard<Replicated>(M(M::Random(16, 8)), g);
    const double lr = 0.1;
// FRAGMENT
  });
}
