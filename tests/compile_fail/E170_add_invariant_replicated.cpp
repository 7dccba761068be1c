// [shardalg.E170] an Invariant operand mixed with a Replicated one: `h + x` (the residual stream
// h[I] plus a value x[R] whose gradient is per-rank) has no typed backward and must not compile;
// the fix the diagnostic names, f = copy_to(h) (I → R, backward all_reduce), must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto h = mk<Invariant>(4, 4);
  auto x = mk<Replicated>(4, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = h + x;
#else
  auto y = copy_to(h) + x;
#endif
  (void)y;
}
