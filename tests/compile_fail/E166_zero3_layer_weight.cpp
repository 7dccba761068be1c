// [shardalg.E166] a ZeRO-3 parameter handed to a layer as its weight: a ColumnParallelLinear takes
// W[tp:C], and W[tp:C, dp:Row] is 1/D of it, so building the layer from it must not compile (the
// implicit conversion to a Sharded is the diagnostic); the fix, `nn::unshard(w)` just before the
// forward, must.
#include <shardalg/nn.hpp>
#include <shardalg/nn/models/zero3.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const auto w = Sharded<double, ColSharded>(CpuBackend::matrix<double>::Ones(4, 4), 4, 4, mesh.group("tp"));
  const auto w3 = nn::FullyShardedParam<double, ColSharded>::shard(w, mesh.group("dp"));
#ifdef SHARDALG_EXPECT_FAIL
  const nn::ColumnParallelLinear<double> fc(w3, std::nullopt);
#else
  const nn::ColumnParallelLinear<double> fc(nn::unshard(w3), std::nullopt);
#endif
  (void)fc;
}
