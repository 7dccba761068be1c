// [shardalg.E116] bias layout: `add_bias(h, b)` must not compile; the fix the
// diagnostic names, `add_bias(h, split<ColSharded>(b))`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto h = mk<ColSharded>(4, 4); auto b = mk<Replicated>(1, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = add_bias(h, b);
#else
  auto y = add_bias(h, split<ColSharded>(b));
#endif
  (void)y;
}
