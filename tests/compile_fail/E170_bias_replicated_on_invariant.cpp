// [shardalg.E170] a Replicated bias added to an Invariant activation: the bias's gradient would be
// per-rank (Partial) while the activation's is whole. It must not compile; a bias typed I (a
// parameter every rank updates redundantly) must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L, class T = double>
Sharded<T, L> mk(Index r, Index c) {
  return Sharded<T, L>(CpuBackend::matrix<T>::Zero(r, c), r, c, Group(SelfComm{}));
}

int main() {
  auto z = mk<Invariant>(4, 8);
#ifdef SHARDALG_EXPECT_FAIL
  auto b = mk<Replicated>(1, 8);
#else
  auto b = mk<Invariant>(1, 8);
#endif
  auto y = add_bias(z, b);
  (void)y;
}
