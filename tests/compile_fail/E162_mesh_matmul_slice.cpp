// [shardalg.E162] a mesh product whose rule on one axis is R · Row (a free slice of the replicated
// operand), which the mesh matmul does not take implicitly. It must not compile; splitting the
// replicated operand on that axis first (C · Row, a Partial on tp) must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<dp, RowSharded>, On<tp, Replicated>>> x(CpuBackend::matrix<double>::Zero(2, 4), 2, 4, mesh);
  const MeshSharded<double, Axes<On<dp, Replicated>, On<tp, RowSharded>>> w(CpuBackend::matrix<double>::Zero(4, 3), 4, 3, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto z = matmul(x, w);
#else
  auto z = matmul(split<tp, ColSharded>(x), w);  // X[dp:Row, tp:C] · W[dp:R, tp:Row] → [dp:Row, tp:Partial]
#endif
  (void)z;
}
