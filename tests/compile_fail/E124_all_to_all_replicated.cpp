// [shardalg.E124] all to all replicated: `all_to_all<ColSharded>(x)` must not compile; the fix the
// diagnostic names, `split<ColSharded>(x)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Replicated>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = all_to_all<ColSharded>(x);
#else
  auto y = split<ColSharded>(x);
#endif
  (void)y;
}
