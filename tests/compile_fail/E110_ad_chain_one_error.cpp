// [shardalg.E110] in a chain of ad:: ops: the GeLU of a Partial value must not compile, and with
// that one diagnostic only — the ops after it (sum, backward, grad) take its InvalidOperation
// without a "no matching function" of their own (autodiff/invalid.hpp). The fix the diagnostic
// names, all_reduce first, must compile.
#include <shardalg/autodiff.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto x = t.input(shard<Replicated>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto w1 = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(8, 6), g));
  auto w2 = t.input(shard<RowSharded>(CpuBackend::matrix<double>::Random(6, 8), g));
  auto z = ad::matmul(ad::matmul(x, w1), w2);  // Z[Partial]
#ifdef SHARDALG_EXPECT_FAIL
  auto y = ad::map(z, ad::gelu);
#else
  auto y = ad::map(ad::all_reduce(z), ad::gelu);
#endif
  auto loss = ad::sum(ad::hadamard(y, y));
  t.backward(loss);
  auto dw1 = t.grad(w1);
  (void)dw1;
}
