// [shardalg.E164] view<tp>(x) while x is still split on dp: the one-axis Sharded on tp's group
// would not be one tensor. It must not compile; gathering dp first must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<dp, RowSharded>, On<tp, ColSharded>>> x(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto v = view<tp>(x);
#else
  auto v = view<tp>(all_gather<dp>(x));
#endif
  (void)v;
}
