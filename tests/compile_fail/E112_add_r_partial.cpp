// [shardalg.E112] add r partial: `x + z` must not compile; the fix the
// diagnostic names, `x + all_reduce(z)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Replicated>(4, 4); auto z = mk<Partial>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = x + z;
#else
  auto y = x + all_reduce(z);
#endif
  (void)y;
}
