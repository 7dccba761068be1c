// [shardalg.E105] matmul partial row: `matmul(a, b)` must not compile; the fix the
// diagnostic names, `matmul(all_reduce(a), b)`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto a = mk<Partial>(4, 4); auto b = mk<RowSharded>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = matmul(a, b);
#else
  auto y = matmul(all_reduce(a), b);
#endif
  (void)y;
}
