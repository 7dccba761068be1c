// [shardalg.E170] on one mesh axis: the tensor-parallel residual stream X[dp:Row, tp:I] fed to a
// column-parallel weight W[dp:R, tp:C] without f. It must not compile; copy_to<tp>(x) (f on the
// tp axis: I → R, backward all_reduce over tp) must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<dp, RowSharded>, On<tp, Invariant>>> x(CpuBackend::matrix<double>::Zero(2, 4), 2, 4, mesh);
  const MeshSharded<double, Axes<On<dp, Replicated>, On<tp, ColSharded>>> w(CpuBackend::matrix<double>::Zero(4, 2), 4, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = matmul(x, w);
#else
  auto y = matmul(copy_to<tp>(x), w);
#endif
  (void)y;
}
