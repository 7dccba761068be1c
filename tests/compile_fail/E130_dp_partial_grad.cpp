// [shardalg.E130] on the dp axis: a data-parallel replica's gradient is Partial on dp (it holds
// only its batch's contribution), so handing it to the optimizer before the DP all-reduce — the
// forgotten sync — must not compile; the fix the diagnostic names, all_reduce<dp>(g), must.
#include <shardalg/nn/models/data_parallel.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"dp", 1}, {"tp", 1}});
  const Group& t = mesh.group("tp");
  auto w = Sharded<double, ColSharded>(CpuBackend::matrix<double>::Ones(2, 4), 2, 4, t);
  auto g = stack<dp, Partial>(mesh.group("dp"), lift<tp>(w));  // G[dp:Partial, tp:C]
  nn::Adam<double> adam;
  adam.begin_step();
  const nn::ParamInfo info{"w", true, {}};
#ifdef SHARDALG_EXPECT_FAIL
  nn::update(adam, info, w, g);
#else
  nn::update(adam, info, w, all_reduce<dp>(g));
#endif
}
