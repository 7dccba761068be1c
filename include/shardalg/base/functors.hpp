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

namespace shardalg::fn {

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
