// [shardalg.E130] update with a Partial gradient: a LayerNorm on row-sharded tokens leaves its
// weight gradient Partial (each rank summed only its own tokens), so
// `nn::sgd_update(gamma, dgamma, lr)` must not compile; the fix the diagnostic names,
// `nn::sgd_update(gamma, all_reduce(dgamma), lr)`, must.
#include <shardalg/nn.hpp>

using namespace shardalg;

int main() {
  const Group g(SelfComm{});
  auto ln = nn::LayerNorm<double>::init(4, nn::NormKind::layer, g);
  const auto x = Sharded<double, RowSharded>(CpuBackend::matrix<double>::Ones(2, 4), 2, 4, g);
  const auto f = ln.forward(x);
  const auto grads = ln.backward(f.cache, x);  // grads.params.dgamma: [1, 4] Partial
#ifdef SHARDALG_EXPECT_FAIL
  nn::sgd_update(ln.gamma(), grads.params.dgamma, 0.1);
#else
  nn::sgd_update(ln.gamma(), all_reduce(grads.params.dgamma), 0.1);
#endif
}
