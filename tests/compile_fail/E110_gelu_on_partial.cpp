// [shardalg.E110] gelu on partial: `map(z, f)` must not compile; the fix the
// diagnostic names, `map(all_reduce(z), f)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto z = mk<Partial>(4, 4); auto f = [](double v) { return v > 0 ? v : 0.0; };
#ifdef SHARDALG_EXPECT_FAIL
  auto y = map(z, f);
#else
  auto y = map(all_reduce(z), f);
#endif
  (void)y;
}
