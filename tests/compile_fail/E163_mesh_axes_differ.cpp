// [shardalg.E163] operands on the same axes in another order: the order is the nesting of the
// splits, so X[dp:.., tp:..] + Y[tp:.., dp:..] has no common block layout. It must not compile;
// operands built with one axis list must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<dp, Replicated>, On<tp, Replicated>>> a(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  const MeshSharded<double, Axes<On<tp, Replicated>, On<dp, Replicated>>> b(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, mesh);
#else
  const MeshSharded<double, Axes<On<dp, Replicated>, On<tp, Replicated>>> b(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, mesh);
#endif
  auto c = matmul(a, b);
  (void)c;
}
