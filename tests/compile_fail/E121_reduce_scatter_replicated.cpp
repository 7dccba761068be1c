// [shardalg.E121] reduce scatter replicated: `reduce_scatter<RowSharded>(x)` must not compile; the fix the
// diagnostic names, `split<RowSharded>(x)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Replicated>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = reduce_scatter<RowSharded>(x);
#else
  auto y = split<RowSharded>(x);
#endif
  (void)y;
}
