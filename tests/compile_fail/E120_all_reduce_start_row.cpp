// [shardalg.E120] all reduce start on a split value: `all_reduce_start(x)` on x[Row] must not
// compile (only a Partial has a pending sum); the fix the diagnostic names for a split value,
// `all_gather(x)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<RowSharded>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = all_reduce_start(x);
#else
  auto y = all_gather(x);
#endif
  (void)y;
}
