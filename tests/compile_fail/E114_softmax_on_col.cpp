// [shardalg.E114] softmax on col: `softmax_rows(s)` must not compile; the fix the
// diagnostic names, `softmax_rows(all_to_all<RowSharded>(s))`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto s = mk<ColSharded>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = softmax_rows(s);
#else
  auto y = softmax_rows(all_to_all<RowSharded>(s));
#endif
  (void)y;
}
