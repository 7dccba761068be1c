// tests/cuda/backend_testing.hpp — what the three CudaBackend test files share: the tolerances
// and the helpers that round a host matrix through 16-bit device storage.
//
// The backend is tested in three translation units (test_backend.cu: transfers, copies, fp32
// GEMM; test_backend_storage.cu: GEMM on fp64, int32, bf16, fp16 storage; test_backend_ops.cu:
// map/zip, the reductions, the core's operators). One file held all of them and took 1.7 GB in
// cicc, nvcc's device front end, which instantiates the host templates as well: each third is
// under 1 GB.
//
// Tolerances. fp32: normwise relative ≤ 1e-5 against a double reference. bf16 storage (8
// significand bits, unit roundoff u = 2⁻⁸ ≈ 3.9e-3) with fp32 compute: the reference is computed
// in double from the *same bf16-rounded inputs*, so the error is the single rounding of each
// output to bf16 (≤ u·|y|) plus fp32 accumulation (≤ k·2⁻²⁴·Σ|a||b| ≤ 2⁻¹⁶·max|y|·(Σ|a||b|/max|y|)
// for k ≤ 256, and that ratio is ≤ 2⁸ for these sizes): at most 2u = 2⁻⁷ normwise. fp16 (11
// bits, u = 2⁻¹¹): 2⁻¹⁰ by the same argument.
#pragma once

#include "cuda_testing.hpp"
#include "shardalg/cuda.hpp"

namespace btest {

using ctest::Mat;

constexpr double kF32 = 1e-5;
constexpr double kBf16 = 1.0 / 128;   // 2u, u = 2^-8
constexpr double kF16 = 1.0 / 1024;   // 2u, u = 2^-11

template <class T>
Mat<double> d(const Mat<T>& m) {
  return m.template cast<double>();
}
/// A host matrix rounded through 16-bit storage and back (the inputs the reference must use).
template <class H>
Mat<float> rounded(const Mat<float>& m) {
  return shardalg::cuda::DeviceMatrix<H>(m).host();
}

}  // namespace btest
