// [shardalg.E130] an optimizer refuses a Partial gradient: nn::Adam::update (like sgd_update) on a
// replicated norm weight with its un-reduced gradient must not compile; all_reduce'd, it must.
#include <shardalg/nn.hpp>

using namespace shardalg;

int main() {
  const Group g(SelfComm{});
  auto ln = nn::LayerNorm<double>::init(4, nn::NormKind::layer, g);
  const auto x = Sharded<double, RowSharded>(CpuBackend::matrix<double>::Ones(2, 4), 2, 4, g);
  const auto grads = ln.backward(ln.forward(x).cache, x);  // dgamma: Partial
  nn::Adam<double> adam;
  adam.begin_step();
  const nn::ParamInfo info{"ln.gamma", false, {}};
#ifdef SHARDALG_EXPECT_FAIL
  adam.update(info, ln.gamma(), grads.params.dgamma);
#else
  adam.update(info, ln.gamma(), all_reduce(grads.params.dgamma));
#endif
}
