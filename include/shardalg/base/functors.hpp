// shardalg/base/functors.hpp — the scalar functions of the core's elementwise operators as named
// functors. A backend runs them wherever its data lives: the CPU backend in Eigen expressions,
// the CUDA backend in kernels (they are __host__ __device__ under nvcc and say so with
// `device_callable`). A lambda would work on the CPU but cannot be a kernel's template argument.
#pragma once

#if defined(__CUDACC__)
#define SHARDALG_HD __host__ __device__
#else
#define SHARDALG_HD
#endif

#include <cmath>

namespace shardalg::fn {

/// A scalar type with its own exp, erf and √, found by argument-dependent lookup: the running bound's
/// elements (precision/running.hpp), whose every operation carries a rounding bound.
template <class T>
concept OwnMath = requires { T::own_math; };

/// exp, erf and √ of a scalar: std:: for the built-in types, the type's own for an OwnMath type.
template <class T>
SHARDALG_HD auto exp_of(T x) {  // std::exp's own result type (float for a 16-bit x)
  if constexpr (OwnMath<T>) return exp(x);
  else return std::exp(x);
}
template <class T>
SHARDALG_HD auto erf_of(T x) {
  if constexpr (OwnMath<T>) return erf(x);
  else return std::erf(x);
}
template <class T>
SHARDALG_HD auto sqrt_of(T x) {
  if constexpr (OwnMath<T>) return sqrt(x);
  else return std::sqrt(x);
}

struct plus {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T a, T b) const { return a + b; }
};
struct minus {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T a, T b) const { return a - b; }
};
struct times {
  static constexpr bool device_callable = true;
  template <class T>
  SHARDALG_HD T operator()(T a, T b) const { return a * b; }
};
template <class T>
struct scale {
  static constexpr bool device_callable = true;
  T alpha;
  SHARDALG_HD T operator()(T x) const { return alpha * x; }
};

}  // namespace shardalg::fn
