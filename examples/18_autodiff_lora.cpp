// 18 — a new tensor-parallel layer with no hand-written backward: a LoRA adapter on a
// column-parallel linear, Y = X·W + α·(X·A)·B, written with the differentiable ops and verified
// against its dense twin at TP 1, 2 and 4 by ad::verify (outputs, every gradient, and central
// finite differences of the P = 1 gradients). docs/course/18_autodiff_lora.md walks through it.
//
//   X[I] → f → X[R];  X[R]·W[C] → C (W frozen);  X[R]·A[R] → U[R];  U[R]·B[C] → C;  Y = … [C]
//   gradients: dB[C] local; dA = Xᵀ[R]·dU[Partial] → Partial: A is replicated and each rank's
//   columns of B contribute a summand — all_reduce(dA) before the update, or nn::sgd_update
//   refuses it (E130); dX[I]: f's adjoint all-reduces it.
//
//   18_autodiff_lora [--tokens 16] [--in 32] [--out 48] [--rank 4]
#include <iostream>
#include <string>

#include "check.hpp"

#include <shardalg/autodiff.hpp>
#include <shardalg/autodiff/verify.hpp>

using namespace shardalg;

int main(int argc, char** argv) {
  using Dense = ad::Named::mapped_type;
  Index tokens = 16, in = 32, out = 48, rank = 4;
  const example::Flags flags("18_autodiff_lora", argc, argv, {{"tokens", &tokens}, {"in", &in}, {"out", &out}, {"rank", &rank}});
  flags.require(out % 4 == 0, "--out " + std::to_string(out) + " must be divisible by 4 (W and B are split over TP 2 and 4)");
  const ad::Named inputs{{"x", Dense::Random(tokens, in)}, {"w", Dense::Random(in, out)},
                         {"a", Dense::Random(in, rank)}, {"b", Dense::Random(rank, out)}};

  // ---- the layer: 8 lines, no backward --------------------------------------------------------
  auto lora = [](ad::Builder<double>& m) {
    auto x = ad::copy_to(m.input<Invariant>("x"));   // f: the residual stream enters the TP region
    auto w = m.constant<ColSharded>("w");             // the frozen base weight, W[C]
    auto a = m.input<Replicated>("a");                // LoRA A [in × r], every rank whole
    auto b = m.input<ColSharded>("b");                // LoRA B [r × out], split like W
    auto y = ad::matmul(x, w) + 0.5 * ad::matmul(ad::matmul(x, a), b);  // Y[C]
    m.output("y", ad::map(y, ad::gelu));
  };
  // ---------------------------------------------------------------------------------------------

  const auto report = ad::verify(lora, inputs, {.worlds = {2, 4}});
  std::cout << report.text();
  return report.pass() ? 0 : 1;
}
