// X[R] · W[C] → H[C];  H[C] · W2[Row] → Z[Partial];  all_reduce → Z[R], against the dense product.
#include <shardalg/shardalg.hpp>

#include <iostream>

int main() {
  using namespace shardalg;
  using M = CpuBackend::matrix<double>;
  const M X = M::Random(4, 6), W = M::Random(6, 8), W2 = M::Random(8, 6);
  double worst = 0;
  run_ranks(2, [&](ThreadComm& comm) {
    Group g = comm;
    auto z = all_reduce(matmul(matmul(shard<Replicated>(X, g), shard<ColSharded>(W, g)), shard<RowSharded>(W2, g)));
    const double e = compare(z, M(X * W * W2)).max_rel;
    if (comm.rank() == 0) worst = e;
  });
  std::cout << "consumer: relative error " << worst << "\n";
  return worst <= 1e-14 ? 0 : 1;
}
