// A ledgered thread group: `comm`, `rank`, `ledger`, `g`, dense H[8x32] and W2[32x16], a tensor x.
#include <fstream>
#include <iostream>
#include <string>
#include <shardalg/shardalg.hpp>
using namespace shardalg;
inline void fragment() {
  run_ranks(2, [&](ThreadComm& comm) {
    const int rank = comm.rank();
    using M = CpuBackend::matrix<double>;
    const M H = M::Random(8, 32), W2 = M::Random(32, 16);
    auto x = shard<Replicated>(M(M::Random(4, 4)), Group(comm));
    (void)rank, (void)x;
// FRAGMENT
  });
}
