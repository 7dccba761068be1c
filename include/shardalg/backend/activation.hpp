// shardalg/backend/activation.hpp — elementwise activations and their derivatives, as functors for
// the core's `map` (non-linear: the core refuses them on Partial, E110). A device backend needs
// them callable on the device: the call operators are templated and __host__ __device__ under
// nvcc (SHARDALG_HD), and `device_callable` says so (the CUDA backend then runs them in a kernel,
// in fp32 for 16-bit storage, instead of a host round trip).
#pragma once

#include <cmath>

#include "shardalg/base/functors.hpp"  // SHARDALG_HD
#include "shardalg/backend/cpu/simd.hpp"

namespace shardalg::nn {

enum class Activation { gelu_tanh, gelu_erf, swiglu };

/// GeLU, tanh approximation: ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
/// On the CPU, float runs `cpu_apply`: backend/cpu/simd.hpp's x·σ(2u), vectorised for the CPU at run
/// time, the same bits in every build (and in the fused kernels, backend/cpu/fused.hpp); other types run
/// `array`, the same function on a whole Eigen array.
struct GeluTanh {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T x) const {
    const T k = T(0.7978845608028654), c = T(0.044715);
    return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
  }
  template <class A>
  auto array(const A& x) const {
    using T = typename A::Scalar;
    const T k = T(0.7978845608028654), c = T(0.044715);
    return T(0.5) * x * (T(1) + (k * (x + c * x.cube())).tanh());
  }
  void cpu_apply(const float* x, float* y, long n) const { simd::gelu_tanh(x, y, n); }
};
/// d/dx of GeluTanh: ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²), t = tanh(…).
struct GeluTanhGrad {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T x) const {
    const T k = T(0.7978845608028654), c = T(0.044715);
    const T t = std::tanh(k * (x + c * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
  }
  template <class A>
  auto array(const A& x) const {
    using T = typename A::Scalar;
    const T k = T(0.7978845608028654), c = T(0.044715);
    const auto t = (k * (x + c * x.cube())).tanh().eval();
    return (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t.square()) * k * (T(1) + T(3) * c * x.square())).eval();
  }
  void cpu_apply(const float* x, float* y, long n) const { simd::gelu_tanh_grad(x, y, n); }
};
/// GeLU, exact: x·Φ(x) = ½x(1 + erf(x/√2)).
struct GeluErf {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + fn::erf_of(x * T(0.7071067811865476)));
  }
};
/// d/dx of GeluErf: Φ(x) + x·φ(x).
struct GeluErfGrad {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T x) const {
    return T(0.5) * (T(1) + fn::erf_of(x * T(0.7071067811865476))) + x * fn::exp_of(T(-0.5) * x * x) * T(0.3989422804014327);
  }
};

}  // namespace shardalg::nn
