// shardalg/observe/held_bytes.hpp — the bytes a rank holds, summed from the tensors themselves.
//
// A sharded tensor holds its local block: W[C] of a [h, f] weight on P ranks is h·(f/P)
// elements, W[R] all h·f, X[Row] of T tokens (T/P)·h. nbytes counts local().size() · sizeof(T),
// so the sum over a layer's parameters, gradients and cached activations is the memory the
// layout actually costs — to compare with cost/memory_formulas.hpp's prediction.
//
//   std::size_t params = verify::sum_bytes(fc1.weight(), fc1.bias(), fc2.weight(), fc2.bias());
//
// Accepted: Sharded tensors, Eigen matrices and arrays, std::optional of either (0 when empty),
// std::vector of trivially sized elements.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <Eigen/Dense>

#include "shardalg/core/sharded.hpp"

namespace shardalg::verify {

template <class T, class L, class B>
[[nodiscard]] std::size_t nbytes(const Sharded<T, L, B>& x) {
  return static_cast<std::size_t>(x.local().size()) * sizeof(T);
}
template <class D>
[[nodiscard]] std::size_t nbytes(const Eigen::DenseBase<D>& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(typename D::Scalar);
}
template <class X>
[[nodiscard]] std::size_t nbytes(const std::optional<X>& x) {
  return x ? nbytes(*x) : 0;
}
template <class X>
[[nodiscard]] std::size_t nbytes(const std::vector<X>& v) {
  return v.size() * sizeof(X);
}
/// The bytes of every argument, summed.
template <class... X>
[[nodiscard]] std::size_t sum_bytes(const X&... x) {
  return (std::size_t{0} + ... + nbytes(x));
}

/// What one rank holds for one layer.
struct Memory {
  std::size_t params = 0, grads = 0, activations = 0;
  Memory& operator+=(const Memory& o) {
    params += o.params, grads += o.grads, activations += o.activations;
    return *this;
  }
};

}  // namespace shardalg::verify
