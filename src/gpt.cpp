// src/gpt.cpp — shardalg::compiled: nn::Gpt<float | double, CpuBackend>, every member, and step()
// with Adam and Sgd. A program that links shardalg::compiled (SHARDALG_EXTERN_TEMPLATES: the
// headers declare these instantiations extern) compiles none of the model's code itself; without
// it the library is header-only, as always. This file only moves where the same code is compiled.
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/optim/optim.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class Gpt<float, CpuBackend>;
template class Gpt<double, CpuBackend>;
template double Gpt<float, CpuBackend>::step(Adam<float, CpuBackend>&, double);
template double Gpt<double, CpuBackend>::step(Adam<double, CpuBackend>&, double);
template double Gpt<float, CpuBackend>::step(Sgd<float, CpuBackend>&, double);
template double Gpt<double, CpuBackend>::step(Sgd<double, CpuBackend>&, double);
}  // namespace shardalg::nn
