// [shardalg.E165] a collective on an axis the tensor does not live on: all_reduce<pp> of a
// dp × tp gradient must not compile; all_reduce<dp>, an axis it has, must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<dp, Partial>, On<tp, ColSharded>>> g(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto r = all_reduce<pp>(g);
#else
  auto r = all_reduce<dp>(g);
#endif
  (void)r;
}
