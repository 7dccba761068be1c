// src/gpt_double.cpp — shardalg::compiled: nn::Gpt<double, CpuBackend>, every member, step()
// with Adam and Sgd, and nn::measure_memory (see src/gpt.cpp).
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/optim/optim.hpp"
#include "shardalg/nn/train/measured_memory.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class Gpt<double, CpuBackend>;
template double Gpt<double, CpuBackend>::step(Adam<double, CpuBackend>&, double);
template double Gpt<double, CpuBackend>::step(Sgd<double, CpuBackend>&, double);
template MemoryReport measure_memory(Gpt<double, CpuBackend>&, Adam<double, CpuBackend>&, std::span<const std::int64_t>,
                                     std::span<const std::int64_t>, double);
}  // namespace shardalg::nn
