// CudaBackend::gemm on the other storage types, against a double (or exact integer) reference on
// the host: fp64, int32 (the exact kernel), bf16 and fp16 storage with fp32 accumulation.
// Tolerances: backend_testing.hpp.
#include <doctest/doctest.h>

#include "backend_testing.hpp"

using namespace shardalg;
using namespace btest;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;

TEST_CASE("CudaBackend::gemm: fp64, int32 (exact kernel), bf16 and fp16 storage with fp32 accumulation") {
  const Index m = 32, k = 64, n = 48;
  {
    const auto A = ctest::random_real<double>(m, k, 1), B = ctest::random_real<double>(k, n, 2);
    DeviceMatrix<double> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0, CudaBackend::view(dA), CudaBackend::view(dB), 0.0, dC);
    CHECK(compare(dC.host(), Mat<double>(A * B)).within(1e-12));
  }
  {
    const auto A = ctest::random_int<std::int32_t>(m, k, 3), B = ctest::random_int<std::int32_t>(n, k, 4);
    DeviceMatrix<std::int32_t> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1, CudaBackend::view(dA), CudaBackend::view(dB, true), 0, dC);
    CHECK(dC.host() == Mat<std::int32_t>(A * B.transpose()));
  }
  {
    const auto A = rounded<bf16>(ctest::random_real<float>(m, k, 5)), B = rounded<bf16>(ctest::random_real<float>(k, n, 6));
    DeviceMatrix<bf16> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0f, CudaBackend::view(dA, false), CudaBackend::view(dB), 0.0f, dC);
    const auto err = compare(d(dC.host()), Mat<double>(d(A) * d(B)));
    INFO("bf16 GEMM: ", err, " (bound 2^-7)");
    CHECK(err.within(kBf16));
  }
  {
    const auto A = rounded<cuda::f16>(ctest::random_real<float>(k, m, 7)), B = rounded<cuda::f16>(ctest::random_real<float>(k, n, 8));
    DeviceMatrix<cuda::f16> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0f, CudaBackend::view(dA, true), CudaBackend::view(dB), 0.0f, dC);
    const auto err = compare(d(dC.host()), Mat<double>(d(A).transpose() * d(B)));
    INFO("fp16 GEMM: ", err, " (bound 2^-10)");
    CHECK(err.within(kF16));
  }
}

