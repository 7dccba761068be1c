// A tensor-parallel MLP's operands on a thread group: X[R], W1[C], W2[Row], A[C], the cotangents
// dY[R] and dH[C], the activation, and the nn::Mlp layer on the same group.
#include <shardalg/nn.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    Group g = comm;
    using M = CpuBackend::matrix<double>;
    const M X = M::Random(16, 8), W1 = M::Random(8, 32), W2 = M::Random(32, 8);
    auto x = shard<Replicated>(X, g);
    auto w1 = shard<ColSharded>(W1, g);
    auto w2 = shard<RowSharded>(W2, g);
    const nn::GeluTanh act;
    auto a = map(matmul(x, w1), act);
    auto dy = shard<Replicated>(M(M::Random(16, 8)), g);
    auto dh = shard<ColSharded>(M(M::Random(16, 32)), g);
    auto mlp = nn::Mlp<double>::init({8, 32, nn::Activation::gelu_tanh, false}, g, {});
    (void)a, (void)dy, (void)dh;
// FRAGMENT
  });
}
