// [shardalg.E115] softmax on partial: `softmax_rows(s)` must not compile; the fix the
// diagnostic names, `softmax_rows(all_reduce(s))`, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto s = mk<Partial>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = softmax_rows(s);
#else
  auto y = softmax_rows(all_reduce(s));
#endif
  (void)y;
}
