// tests/precision/running_support.hpp — what the running-bound tests share (test_running*.cpp,
// test_parallel_norm.cpp): a Sharded tensor of E as doubles, the storage a program of E declares
// to the twin, and error ÷ bound ratios pooled per tensor.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "shardalg/precision/bounds.hpp"
#include "shardalg/precision/running.hpp"
#include "shardalg/shardalg.hpp"

namespace running_support {

using M = Eigen::MatrixXd;

/// The whole tensor, each element converted to double (a 16-bit value through float, exactly).
template <class E, class L>
M dense(const shardalg::Sharded<E, L>& x) {
  return shardalg::CpuBackend::to_host(shardalg::to_dense(x)).unaryExpr(
      [](const E& v) { return static_cast<double>(static_cast<float>(v)); });
}

/// The program's storage: none for float (every tensor kept in fp32), else E's format.
template <class E>
shardalg::precision::Storage storage_of(int p) {
  if constexpr (std::is_same_v<E, float>) return {std::nullopt, p};
  else return {shardalg::precision::format_of<E>, p};
}

/// error ÷ bound of every element, pooled per family of tensors.
struct Pool {
  std::map<std::string, std::vector<double>> ratios;
  template <class Twin>
  double add(const std::string& family, const M& computed, const Twin& twin) {
    namespace pr = shardalg::precision;
    const M r = pr::error_ratios(computed, pr::values(twin), pr::bounds(twin));
    auto& v = ratios[family];
    v.insert(v.end(), r.data(), r.data() + r.size());
    return r.size() ? r.maxCoeff() : 0.0;
  }
  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace running_support
