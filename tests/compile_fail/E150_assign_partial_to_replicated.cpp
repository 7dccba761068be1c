// [shardalg.E150] the most natural mistake: `Sharded<double, Replicated> y = matmul(c, row);`
// (C·Row is Partial) must not compile, and the message names all_reduce; the fixes it names,
// `all_reduce(matmul(c, row))` and `matmul<Replicated>(c, row)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto c = mk<ColSharded>(4, 4);
  auto row = mk<RowSharded>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  Sharded<double, Replicated> y = matmul(c, row);
#else
  Sharded<double, Replicated> y = all_reduce(matmul(c, row));
  Sharded<double, Replicated> y2 = matmul<Replicated>(c, row);
  (void)y2;
#endif
  (void)y;
}
