// [shardalg.E123] split partial: `split<RowSharded>(z)` must not compile; the fix the
// diagnostic names, `reduce_scatter<RowSharded>(z)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto z = mk<Partial>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = split<RowSharded>(z);
#else
  auto y = reduce_scatter<RowSharded>(z);
#endif
  (void)y;
}
