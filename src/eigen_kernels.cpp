// src/eigen_kernels.cpp — shardalg::compiled: Eigen's GEMM and GEMV kernels for float and double
// (backend/cpu/eigen_kernels.hpp says who declares them extern, and when that is safe).
#define SHARDALG_COMPILE_EIGEN_KERNELS
#include "shardalg/backend/cpu/eigen_kernels.hpp"

#include <Eigen/Dense>

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

SHARDALG_EIGEN_KERNEL_INSTANCES(, float)
SHARDALG_EIGEN_KERNEL_INSTANCES(, double)
