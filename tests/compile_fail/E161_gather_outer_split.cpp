// [shardalg.E161] gathering the outer of two splits of one dimension: in X[dp:Row, tp:Row] the row
// blocks nest dp-major, so an all_gather over dp would interleave tp's blocks (PyTorch's wrong
// full_tensor under TP + FSDP). all_gather<dp> must not compile; gathering tp first must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  using X = MeshSharded<double, Axes<On<dp, RowSharded>, On<tp, RowSharded>>>;
  const X x(CpuBackend::matrix<double>::Zero(4, 2), 4, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto y = all_gather<dp>(x);
#else
  auto y = all_gather<dp>(all_gather<tp>(x));
#endif
  (void)y;
}
