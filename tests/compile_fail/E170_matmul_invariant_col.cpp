// [shardalg.E170] the forgotten f: X[I] · W[C] feeds the invariant residual stream straight into a
// column-parallel matmul, so the backward would miss f's all-reduce of dX. It must not compile;
// the fix the diagnostic names, copy_to(x) first (X[R] · W[C] → Y[C]), must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto x = mk<Invariant>(4, 8);
  auto w = mk<ColSharded>(8, 4);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = matmul(x, w);
#else
  auto y = matmul(copy_to(x), w);
#endif
  (void)y;
}
