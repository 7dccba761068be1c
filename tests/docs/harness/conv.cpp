// A thread group `g`, the dense weight and bias of a 3×3 convolution of 2 → 3 channels (Wdense,
// bdense), a dense input X (H × N·W·C_in), the output's cotangent dy, `lr`, and a row-split
// image x with a halo of r rows and a halo block dxh.
#include <shardalg/shardalg.hpp>
#include <shardalg/nn/layers/conv2d.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    Group g = comm;
    using M = CpuBackend::matrix<double>;
    const M Wdense = M::Random(3 * 3 * 2, 3), bdense = M::Random(1, 3), X = M::Random(12, 2 * 5 * 2);
    auto dy = shard<RowSharded>(M(M::Random(12, 2 * 5 * 3)), g);
    const double lr = 0.1;
    auto x = shard<RowSharded>(M(M::Random(12, 4)), g);
    const Index r = 1;
    HaloBlock<double> dxh = halo_exchange(x, r);
// FRAGMENT
  });
}
