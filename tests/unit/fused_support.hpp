// tests/unit/fused_support.hpp — what the fused-kernel tests share (test_fused.cpp,
// test_fused_block.cpp): Unfused, a backend that is the CPU's with nn::Fused's primary template
// (the unfused composition), a bitwise comparison and seeded random blocks.
#pragma once

#include <cstdlib>
#include <cstring>
#include <shardalg/backend/cpu/fused.hpp>

namespace fused_support {

template <class T>
using Mat = shardalg::CpuBackend::matrix<T>;

/// A backend that is the CPU's with nn::Fused's primary template: the unfused composition.
struct Unfused : shardalg::CpuBackend {};

template <class T>
bool same_bits(const Mat<T>& a, const Mat<T>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0;
}

template <class T>
Mat<T> random(shardalg::Index r, shardalg::Index c, double scale, unsigned seed) {
  std::srand(seed);
  return (Mat<T>::Random(r, c) * static_cast<T>(scale)).eval();
}

}  // namespace fused_support

namespace shardalg::nn {
template <>
struct Kernels<fused_support::Unfused> : Kernels<CpuBackend> {};
}  // namespace shardalg::nn
