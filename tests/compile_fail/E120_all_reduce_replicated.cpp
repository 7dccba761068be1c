// [shardalg.E120] all reduce replicated: `all_reduce(x)` must not compile; the fix the
// diagnostic names, `copy_to(x)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Replicated>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = all_reduce(x);
#else
  auto y = copy_to(x);
#endif
  (void)y;
}
