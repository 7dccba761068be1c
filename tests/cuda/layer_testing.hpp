// tests/cuda/layer_testing.hpp — what the CUDA layer and kernel tests share: the bf16 tolerance
// model (test_layers.cu's header derives it and counts each case's roundings: a value whose
// longest dependency chain has n roundings to bf16 is within n·u·max|output|, u = 2⁻⁸, plus 2⁻¹⁶
// for the fp32 arithmetic in between, normwise), and the kernel tests' device round trips.
#pragma once

#include <cstdint>
#include <type_traits>

#include "shardalg/backend/activation.hpp"
#include "shardalg/backend/cpu/fused.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/backend/fused.hpp"
#include "shardalg/cuda.hpp"
#include "testing.hpp"

namespace cudatol {

constexpr double kU = 1.0 / 256;  // bf16 unit roundoff 2⁻⁸
constexpr double kFp32Slack = 1.0 / 65536;
/// The bf16 bound of a value whose longest chain has n roundings.
constexpr double bf16_tol(int n) { return n * kU + kFp32Slack; }

template <class T>
const char* type_name() {
  return std::is_same_v<T, shardalg::cuda::bf16> ? "bf16" : std::is_same_v<T, float> ? "fp32" : "fp64";
}


/// The kernel tests' operands: double on the host, T on the device, and back.
namespace devio {
using shardalg::Index;
using shardalg::CpuBackend;
using shardalg::cuda::CudaBackend;
namespace nn = shardalg::nn;
namespace cuda = shardalg::cuda;
using KG = nn::Kernels<CudaBackend>;
using KC = nn::Kernels<CpuBackend>;
using MD = testing::Mat<double>;

template <class T>
cuda::DeviceMatrix<T> dev(const MD& m) {
  return cuda::DeviceMatrix<T>(m);
}
template <class T>
MD back(const cuda::DeviceMatrix<T>& m) {
  return m.host().template cast<double>();
}
/// Uniform in [lo, hi), rounded to T (the values both sides compute from).
template <class T>
MD input(Index r, Index c, std::uint64_t seed, double lo = -1, double hi = 1) {
  const MD u = testing::random_real<double>(r, c, seed);  // [-1, 1)
  return u.unaryExpr([&](double v) { return static_cast<double>(static_cast<T>(lo + (v + 1) / 2 * (hi - lo))); });
}
}  // namespace devio

}  // namespace cudatol
