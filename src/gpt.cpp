// src/gpt.cpp — shardalg::compiled: nn::Gpt<float, CpuBackend>, every member, step() with
// Adam and Sgd, and nn::measure_memory (double: src/gpt_double.cpp; one TU per type keeps each
// under 1 GB of compiler memory). A program that links shardalg::compiled (SHARDALG_EXTERN_TEMPLATES: the headers declare
// these instantiations extern) compiles none of the model's code itself; without it the library
// is header-only, as always. This file only moves where the same code is compiled.
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/optim/optim.hpp"
#include "shardalg/nn/train/measured_memory.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class Gpt<float, CpuBackend>;
template double Gpt<float, CpuBackend>::step(Adam<float, CpuBackend>&, double);
template double Gpt<float, CpuBackend>::step(Sgd<float, CpuBackend>&, double);
template MemoryReport measure_memory(Gpt<float, CpuBackend>&, Adam<float, CpuBackend>&, std::span<const std::int64_t>,
                                     std::span<const std::int64_t>, double);
}  // namespace shardalg::nn
