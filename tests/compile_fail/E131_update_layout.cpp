// [shardalg.E131] update with a gradient of another layout: a ColSharded weight's gradient must be
// ColSharded too, so `nn::sgd_update(w, dw[R], lr)` must not compile; the fix the diagnostic
// names, `nn::sgd_update(w, split<ColSharded>(dw), lr)`, must.
#include <shardalg/nn.hpp>

using namespace shardalg;

int main() {
  const Group g(SelfComm{});
  auto w = Sharded<double, ColSharded>(CpuBackend::matrix<double>::Ones(4, 4), 4, 4, g);
  const auto dw = Sharded<double, Replicated>(CpuBackend::matrix<double>::Ones(4, 4), 4, 4, g);
#ifdef SHARDALG_EXPECT_FAIL
  nn::sgd_update(w, dw, 0.1);
#else
  nn::sgd_update(w, split<ColSharded>(dw), 0.1);
#endif
}
