// Break-it lab 6 (docs/course/break_it/06_nonlinear_on_partial.md): a non-linear op on a Partial. GeLU(Σ_r Z_r) is not
// Σ_r GeLU(Z_r): applied to the summands it computes something else on every rank. E110; reduce
// first.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto h = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto w = t.input(shard<RowSharded>(CpuBackend::matrix<double>::Random(8, 6), g));
  auto z = ad::matmul(h, w);  // Partial
#ifdef SHARDALG_EXPECT_FAIL
  auto a = ad::map(z, ad::gelu);
#else
  auto a = ad::map(ad::all_reduce<Invariant>(z), ad::gelu);
#endif
  (void)a;
}
