// [shardalg.E125] copy to partial: `copy_to(z)` must not compile; the fix the
// diagnostic names, `copy_to(all_reduce(z))`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto z = mk<Partial>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = copy_to(z);
#else
  auto y = copy_to(all_reduce(z));
#endif
  (void)y;
}
