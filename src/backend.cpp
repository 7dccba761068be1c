// src/backend.cpp — shardalg::compiled: CpuBackend::gemm for float, double, int32 and int64 (the
// Eigen GEMM kernels and their four transposition forms, compiled once; see src/gpt.cpp).
#include "shardalg/backend/cpu/backend.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg {
template void CpuBackend::gemm<float>(float, MatView<float>, MatView<float>, float, float*, Index);
template void CpuBackend::gemm<double>(double, MatView<double>, MatView<double>, double, double*, Index);
template void CpuBackend::gemm<std::int32_t>(std::int32_t, MatView<std::int32_t>, MatView<std::int32_t>, std::int32_t,
                                            std::int32_t*, Index);
template void CpuBackend::gemm<std::int64_t>(std::int64_t, MatView<std::int64_t>, MatView<std::int64_t>, std::int64_t,
                                            std::int64_t*, Index);
}  // namespace shardalg
