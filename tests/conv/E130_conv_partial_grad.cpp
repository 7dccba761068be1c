// [shardalg.E130] update with a Partial gradient: a convolution on an image whose rows are split
// across ranks leaves its weight gradient Partial (each rank summed over its own pixels), so
// `nn::sgd_update(conv.weight(), grads.params.dw, lr)` must not compile; the fix the diagnostic
// names, `nn::sgd_update(conv.weight(), all_reduce(grads.params.dw), lr)`, must. Built by
// tests/conv/CMakeLists.txt like tests/compile_fail's cases (-fsyntax-only, the ID matched).
#include <shardalg/nn/layers/conv2d.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  const Group g(SelfComm{});
  const nn::Conv2dShape s{.height = 4, .width = 3, .in_channels = 2, .out_channels = 2, .kernel = 3};
  auto conv = nn::Conv2d<double>::init(s, true, g, nn::NormalInit{1, 0.1}, 0);
  const auto x = Sharded<double, RowSharded>(CpuBackend::matrix<double>::Ones(4, 6), 4, 6, g);
  const auto f = conv.forward(x);
  const auto grads = conv.backward(f.cache, f.y);  // grads.params.dw: [18, 2] Partial
#ifdef SHARDALG_EXPECT_FAIL
  nn::sgd_update(conv.weight(), grads.params.dw, 0.1);
#else
  nn::sgd_update(conv.weight(), all_reduce(grads.params.dw), 0.1);
#endif
}
