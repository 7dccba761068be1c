// [shardalg.E160] a group of the wrong mesh axis: a function that runs its collectives over the
// tensor-parallel group takes AxisGroup<tp>; handing it the data-parallel group must not compile,
// and the fix the diagnostic names, mesh.axis<tp>(), must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

static int tensor_parallel_size(const AxisGroup<tp>& g) { return g.size(); }

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
#ifdef SHARDALG_EXPECT_FAIL
  return tensor_parallel_size(mesh.axis<dp>());
#else
  return tensor_parallel_size(mesh.axis<tp>()) - 1;
#endif
}
