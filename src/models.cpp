// src/models.cpp — shardalg::compiled: nn::DataParallelGpt<float | double, CpuBackend> and
// nn::PipelineGpt<float | double, without and with sequence parallelism, CpuBackend> (see
// src/gpt.cpp).
#include "shardalg/nn/models/data_parallel.hpp"
#include "shardalg/nn/models/pipeline_gpt.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class DataParallelGpt<float, CpuBackend>;
template class DataParallelGpt<double, CpuBackend>;
template class PipelineGpt<float, false, CpuBackend>;
template class PipelineGpt<float, true, CpuBackend>;
template class PipelineGpt<double, false, CpuBackend>;
template class PipelineGpt<double, true, CpuBackend>;
}  // namespace shardalg::nn
