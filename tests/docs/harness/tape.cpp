// Dense X[8x16], W1[16x64], W2[64x16] and a thread group `g`: the operands of a derived MLP.
#include <shardalg/autodiff.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    Group g = comm;
    using M = CpuBackend::matrix<double>;
    const M X = M::Random(8, 16), W1 = M::Random(16, 64), W2 = M::Random(64, 16);
// FRAGMENT
  });
}
