// [shardalg.E111] bias on partial: `add_bias(z, b)` must not compile; the fix the
// diagnostic names, `add_bias(all_reduce(z), b)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto z = mk<Partial>(4, 4); auto b = mk<Replicated>(1, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = add_bias(z, b);
#else
  auto y = add_bias(all_reduce(z), b);
#endif
  (void)y;
}
