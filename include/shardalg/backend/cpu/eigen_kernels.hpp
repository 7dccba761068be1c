// shardalg/backend/cpu/eigen_kernels.hpp — Eigen's matrix-product kernels for float and double,
// compiled once in shardalg::compiled (src/eigen_kernels.cpp) instead of in every translation unit
// that multiplies two Eigen matrices.
//
// Every `A * B` on Eigen matrices — the dense references, the tests' and the examples' checks,
// the layers' own Eigen products — instantiates Eigen's blocked GEMM (gebp_kernel and the two
// packing routines) and its GEMV. Under GCC 12 -O1 that is about 2 CPU-s per translation unit for
// double and as much again for float; the test build instantiated the double kernel in 61 files.
//
// Opt-in: a translation unit that defines SHARDALG_EXTERN_TEMPLATES and SHARDALG_EXTERN_EIGEN_KERNELS
// declares them `extern template` and links them from shardalg::compiled. The kernels' template
// arguments follow Eigen's packet sizes (gebp_traits), which depend on the vector instructions the
// compiler may use: a program defines SHARDALG_EXTERN_EIGEN_KERNELS only where it is compiled with
// the same `-m`/`-march` flags as the library (otherwise the link names kernels the library does not
// hold). The project's own tests, examples and tools get it from the build tree (CMakeLists.txt);
// an installed shardalg::compiled does not pass it on.
#pragma once

#include <Eigen/Core>

// The kernels C ← A · B (and the matrix-vector product) dispatches to for scalar S: the GEMM
// micro-kernel, the packing of A (column- or row-major) and of B (either order), and the GEMV in
// both storage orders. EXT is `extern` for the declarations and empty for the definitions.
#define SHARDALG_EIGEN_KERNEL_INSTANCES(EXT, S)                                                                       \
  EXT template struct Eigen::internal::gebp_kernel<                                                                   \
      S, S, Eigen::Index, Eigen::internal::blas_data_mapper<S, Eigen::Index, Eigen::ColMajor, Eigen::Unaligned, 1>,    \
      Eigen::internal::gebp_traits<S, S>::mr, Eigen::internal::gebp_traits<S, S>::nr, false, false>;                  \
  EXT template struct Eigen::internal::gemm_pack_lhs<                                                                 \
      S, Eigen::Index, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::ColMajor>,                      \
      Eigen::internal::gebp_traits<S, S>::mr, Eigen::internal::gebp_traits<S, S>::LhsProgress,                        \
      Eigen::internal::gebp_traits<S, S>::LhsPacket4Packing, Eigen::ColMajor>;                                        \
  EXT template struct Eigen::internal::gemm_pack_lhs<                                                                 \
      S, Eigen::Index, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::RowMajor>,                      \
      Eigen::internal::gebp_traits<S, S>::mr, Eigen::internal::gebp_traits<S, S>::LhsProgress,                        \
      Eigen::internal::gebp_traits<S, S>::LhsPacket4Packing, Eigen::RowMajor>;                                        \
  EXT template struct Eigen::internal::gemm_pack_rhs<                                                                 \
      S, Eigen::Index, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::ColMajor>,                      \
      Eigen::internal::gebp_traits<S, S>::nr, Eigen::ColMajor>;                                                       \
  EXT template struct Eigen::internal::gemm_pack_rhs<                                                                 \
      S, Eigen::Index, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::RowMajor>,                      \
      Eigen::internal::gebp_traits<S, S>::nr, Eigen::RowMajor>;                                                       \
  EXT template struct Eigen::internal::general_matrix_vector_product<                                                 \
      Eigen::Index, S, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::ColMajor>, Eigen::ColMajor,     \
      false, S, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::RowMajor>, false>;                     \
  EXT template struct Eigen::internal::general_matrix_vector_product<                                                 \
      Eigen::Index, S, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::RowMajor>, Eigen::RowMajor,     \
      false, S, Eigen::internal::const_blas_data_mapper<S, Eigen::Index, Eigen::ColMajor>, false>;

// Not under nvcc (__CUDACC__): its device front end instantiates the declared classes (70 MB more in
// cicc for a CUDA test) and its host pass warns on each declaration's vector-typed arguments.
#if defined(SHARDALG_EXTERN_TEMPLATES) && defined(SHARDALG_EXTERN_EIGEN_KERNELS) && \
    !defined(SHARDALG_COMPILE_EIGEN_KERNELS) && !defined(__CUDACC__)
SHARDALG_EIGEN_KERNEL_INSTANCES(extern, float)
SHARDALG_EIGEN_KERNEL_INSTANCES(extern, double)
#endif
