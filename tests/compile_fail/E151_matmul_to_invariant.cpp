// [shardalg.E151] matmul<Invariant>: the planner does not reach I (no chain of its steps makes a
// gradient whole on every rank); I is reached by its named conversions. `matmul<Invariant>` must
// not compile; the named form, all_reduce<Invariant>(matmul(h, w)) (Megatron's g), must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  Sharded<double, ColSharded> h(CpuBackend::matrix<double>::Zero(2, 4), 2, 4, g);
  Sharded<double, RowSharded> w(CpuBackend::matrix<double>::Zero(4, 2), 4, 2, g);
#ifdef SHARDALG_EXPECT_FAIL
  auto z = matmul<Invariant>(h, w);
#else
  auto z = all_reduce<Invariant>(matmul(h, w));
#endif
  (void)z;
}
