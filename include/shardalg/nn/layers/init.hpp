// shardalg/nn/layers/init.hpp — tensor-parallel-invariant parameters: each rank builds its own block of
// a matrix from a function of the *global* index, so no rank materialises the master weight and
// the model at TP=k is the model at TP=1 bit for bit.
//
//   from_global<T, L>(rows, cols, g, f)   block (i, j) := f(global row, global col)
//   normal_init(seed, tensor, std)         f = std · N(0, 1) at (seed, tensor, row, col)
//
// A fused weight (SwiGLU's [gate | up], attention's [q | k | v]) stores its shards interleaved;
// its `ColumnMap` maps a physical column to the logical (part, column) it holds, and both the
// random init and the load from dense masters go through it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "shardalg/core/sharded.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/backend/random.hpp"

namespace shardalg::nn {

/// Where a physical column of a fused weight comes from.
struct LogicalCol {
  int part;   // which logical tensor (0 for an unfused weight)
  Index col;  // its column there
};

/// This rank's block of a rows × cols matrix in layout L (R, Row or C) with element
/// (i, j) = f(i, j) at the global index.
template <Element T, Layout L, class B = CpuBackend, class F>
Sharded<T, L, B> from_global(Index rows, Index cols, const Group& g, F f) {
  static_assert(!std::is_same_v<L, Partial>, "from_global: a Partial value has no element-wise global index");
  const int p = g.size();
  shardalg::detail::check_shape(rows, cols, "from_global<", L::name, ">");
  const auto [lr, lc] = local_shape(L::kind, rows, cols, p, g.rank());
  const Index r0 = L::kind == LayoutKind::row ? block_offset(rows, p, g.rank()) : 0;
  const Index c0 = L::kind == LayoutKind::col ? block_offset(cols, p, g.rank()) : 0;
  auto local = Kernels<B>::template generate<T>(lr, lc, [&](Index i, Index j) { return static_cast<T>(f(r0 + i, c0 + j)); });
  return Sharded<T, L, B>(std::move(local), rows, cols, g);
}

/// Normal(0, std²) keyed by (seed, tensor, row, col).
struct NormalInit {
  std::uint64_t seed;
  double std;
  double operator()(std::uint64_t tensor, Index row, Index col) const { return std * normal_at(seed, tensor, row, col); }
};

/// How a layer's weights are initialised: Megatron's normal(0, 0.02), and the residual output
/// projections (attention's proj, the MLP's fc2) at 0.02 / √(2·num_layers). Biases start at zero,
/// norm weights at one.
struct InitConfig {
  std::uint64_t seed = 0x5eed;
  double std = 0.02;
  int num_layers = 1;
  std::uint32_t layer = 0;
  [[nodiscard]] NormalInit normal() const { return {seed, std}; }
  [[nodiscard]] NormalInit scaled_output() const {
    return {seed, std / std::sqrt(2.0 * static_cast<double>(num_layers))};
  }
  [[nodiscard]] std::uint64_t id(TensorKind k) const { return tensor_id(layer, k); }
};

}  // namespace shardalg::nn
