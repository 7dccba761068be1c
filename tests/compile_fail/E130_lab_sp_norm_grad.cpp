// Break-it lab 1 (docs/course/break_it/01_sp_norm_grad.md; Megatron-LM issue 1446): under sequence
// parallelism a LayerNorm runs on X[Row] with its weight γ replicated, so each rank's dγ sums only
// its own tokens — a Partial. Handing it to the optimizer unsummed must not compile (E130); the fix
// the diagnostic names, all_reduce(dγ), must.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>
#include <shardalg/nn/optim/optim.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  auto gamma = shard<Replicated>(CpuBackend::matrix<double>::Ones(1, 8), g);
  auto beta = shard<Replicated>(CpuBackend::matrix<double>::Zero(1, 8), g);
  ad::Tape t;
  auto x = t.input(shard<RowSharded>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto gv = t.input(gamma), bv = t.input(beta);
  t.backward(ad::sum(ad::layer_norm(x, gv, bv, 1e-5)));
  auto dgamma = t.grad(gv);  // Sharded<double, Partial>
#ifdef SHARDALG_EXPECT_FAIL
  nn::sgd_update(gamma, dgamma, 0.1);
#else
  nn::sgd_update(gamma, all_reduce(dgamma), 0.1);
#endif
}
