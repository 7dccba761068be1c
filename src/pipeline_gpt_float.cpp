// src/pipeline_gpt_float.cpp — shardalg::compiled: nn::PipelineGpt<float, without and with sequence
// parallelism, CpuBackend> (see src/gpt.cpp; one TU per element type).
#include "shardalg/nn/models/pipeline_gpt.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class PipelineGpt<float, false, CpuBackend>;
template class PipelineGpt<float, true, CpuBackend>;
}  // namespace shardalg::nn
