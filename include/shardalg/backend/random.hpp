// shardalg/backend/random.hpp — randomness as a function of the global index.
//
// Every random number the layers use (weight init, dropout masks) is
//
//     philox4x32_10(counter = (col, row, tensor lo, tensor hi), key = seed)
//
// of a *logical, global* index: (seed, tensor id, global row, global column) — weights at
// uniform_at / normal_at (two words per element); dropout masks at dropout_uniform (one word per
// element, four neighbouring columns per Philox block: counter column col / 4). No generator state
// is carried, nothing depends on the rank or the world size, so
//   - each rank generates exactly its own shard, without materialising the master weight;
//   - the model at TP=k equals the model at TP=1 bit for bit;
//   - a dropout mask is the same matrix for any layout (R, Row, C) and any world size.
// Interleaved weights (SwiGLU's fused gate/up, the fused QKV of grouped-query attention) map a
// physical column to its logical (tensor, column) first; see nn/layers/init.hpp.
//
// Philox4x32-10 is Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11); the
// known-answer vectors of Random123 are checked in tests/layers.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "shardalg/base/index.hpp"

namespace shardalg::nn {

using Philox4x32Counter = std::array<std::uint32_t, 4>;
using Philox4x32Key = std::array<std::uint32_t, 2>;

/// Philox4x32 with 10 rounds (the Random123 reference algorithm).
constexpr Philox4x32Counter philox4x32_10(Philox4x32Counter ctr, Philox4x32Key key) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += w0;
      key[1] += w1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * ctr[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

/// The four 32-bit words for one global element of one tensor. Rows and columns up to 2³² each.
constexpr Philox4x32Counter index_bits(std::uint64_t seed, std::uint64_t tensor, Index row, Index col) {
  const Philox4x32Counter ctr{static_cast<std::uint32_t>(col), static_cast<std::uint32_t>(row),
                              static_cast<std::uint32_t>(tensor), static_cast<std::uint32_t>(tensor >> 32)};
  const Philox4x32Key key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  return philox4x32_10(ctr, key);
}

namespace detail {
/// 53 random bits from two words, as a double in [0, 1).
constexpr double unit53(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}
}  // namespace detail

/// Uniform in [0, 1) at (seed, tensor, row, col).
constexpr double uniform_at(std::uint64_t seed, std::uint64_t tensor, Index row, Index col) {
  const auto w = index_bits(seed, tensor, row, col);
  return detail::unit53(w[0], w[1]);
}

/// The dropout masks' uniform in [0, 1) at (seed, tensor, row, col): one Philox4x32-10 block serves
/// four neighbouring columns — counter (col / 4, row, tensor), word col mod 4, u = word · 2⁻³². A
/// function of the global index as uniform_at is (so the mask is the same for every layout and
/// world size), at a quarter of the Philox work: a device kernel draws four columns per block.
constexpr double dropout_uniform(std::uint64_t seed, std::uint64_t tensor, Index row, Index col) {
  const auto w = index_bits(seed, tensor, row, col >> 2);
  return static_cast<double>(w[static_cast<std::size_t>(col & 3)]) * 0x1.0p-32;
}

/// Standard normal at (seed, tensor, row, col), by Box–Muller on two 53-bit uniforms.
inline double normal_at(std::uint64_t seed, std::uint64_t tensor, Index row, Index col) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  const auto w = index_bits(seed, tensor, row, col);
  const double u1 = 1.0 - detail::unit53(w[0], w[1]);  // (0, 1]: log is finite
  const double u2 = detail::unit53(w[2], w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

/// Tensor ids: one per logical parameter (or dropout site) of one layer. Ids are stable across
/// world sizes, which is all TP-invariance needs.
enum class TensorKind : std::uint32_t {
  attn_q = 1,
  attn_k = 2,
  attn_v = 3,
  attn_proj = 4,
  mlp_fc1 = 5,  // the GeLU fc1, or SwiGLU's gate projection
  mlp_up = 6,   // SwiGLU's up projection
  mlp_fc2 = 7,
  linear = 8,   // a stand-alone linear layer
  dropout_attn = 16,
  dropout_mlp = 17,
  dropout = 18,  // a stand-alone dropout
  word_embedding = 24,  // the (tied) vocabulary-parallel embedding
};

constexpr std::uint64_t tensor_id(std::uint32_t layer, TensorKind kind) {
  return (static_cast<std::uint64_t>(layer) << 8) | static_cast<std::uint64_t>(kind);
}

}  // namespace shardalg::nn
