// [shardalg.E166] a ZeRO-3 parameter used without its gather: W[tp:C, dp:Row] holds only this
// rank's rows of its tensor-parallel block, so `matmul(x, w)` must not compile; the fix the
// diagnostic names, `matmul(x, nn::unshard(w))` (all_gather<dp>, then the block on tp), must.
#include <shardalg/nn/models/zero3.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const Group& t = mesh.group("tp");
  const auto w = Sharded<double, ColSharded>(CpuBackend::matrix<double>::Ones(4, 4), 4, 4, t);
  const auto x = Sharded<double, Replicated>(CpuBackend::matrix<double>::Ones(2, 4), 2, 4, t);
  const auto w3 = nn::FullyShardedParam<double, ColSharded>::shard(w, mesh.group("dp"));  // W[tp:C, dp:Row]
#ifdef SHARDALG_EXPECT_FAIL
  const auto y = matmul(x, w3);
#else
  const auto y = matmul(x, nn::unshard(w3));
#endif
  (void)y;
}
