// As ledger.cpp, with the ledger and its group already made: `ledger`, `g`.
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
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    (void)rank, (void)x;
// FRAGMENT
  });
}
