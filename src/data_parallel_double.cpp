// src/data_parallel_double.cpp — shardalg::compiled: nn::DataParallelGpt<double, CpuBackend> (see src/gpt.cpp; the
// other element type in src/data_parallel_float.cpp, the pipeline models in src/pipeline_gpt_*.cpp: one TU for
// all of them took 2.0 GB of compiler memory).
#include "shardalg/nn/models/data_parallel.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class DataParallelGpt<double, CpuBackend>;
}  // namespace shardalg::nn
