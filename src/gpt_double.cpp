// src/gpt_double.cpp — shardalg::compiled: nn::Gpt<double, CpuBackend>, every member, and step()
// with Adam and Sgd (see src/gpt.cpp).
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/optim/optim.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class Gpt<double, CpuBackend>;
template double Gpt<double, CpuBackend>::step(Adam<double, CpuBackend>&, double);
template double Gpt<double, CpuBackend>::step(Sgd<double, CpuBackend>&, double);
}  // namespace shardalg::nn
