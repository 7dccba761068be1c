// [shardalg.E126] reduce from replicated: `reduce_from(x)` must not compile; the fix the
// diagnostic names, `reduce_from(matmul(mk<ColSharded>(4, 4), mk<RowSharded>(4, 4)))`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Replicated>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = reduce_from(x);
#else
  auto y = reduce_from(matmul(mk<ColSharded>(4, 4), mk<RowSharded>(4, 4)));
#endif
  (void)y;
}
