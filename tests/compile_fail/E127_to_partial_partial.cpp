// [shardalg.E127] to_partial of a Partial must not compile; of a split tensor it must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

template <class L>
Sharded<double, L> mk() {
  return Sharded<double, L>(CpuBackend::matrix<double>::Zero(4, 4), 4, 4, Group(SelfComm{}));
}

int main() {
#ifdef SHARDALG_EXPECT_FAIL
  auto y = to_partial(mk<Partial>());
#else
  auto y = to_partial(mk<RowSharded>());
#endif
  (void)y;
}
