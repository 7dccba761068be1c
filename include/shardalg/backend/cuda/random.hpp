// shardalg/backend/cuda/random.hpp — counter-based randomness keyed by a global element index, the same
// on host and device: dropout on a sharded tensor draws the mask element (i, j) of the *global*
// matrix, so the result is independent of the layout and the group size, and the backward pass
// recomputes the mask from (seed, index) instead of storing it.
#pragma once

#include <cstdint>

#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda {

/// SplitMix64's finaliser: a bijective 64-bit mixer.
SHARDALG_HD inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A uniform draw in [0, 1) with 24 random bits (exact in float) for (seed, index).
SHARDALG_HD inline float uniform01(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(mix64(seed ^ mix64(index)) >> 40) * 0x1p-24f;
}

/// Dropout's keep decision for global element `index` at drop probability p.
SHARDALG_HD inline bool dropout_keep(std::uint64_t seed, std::uint64_t index, float p) {
  return uniform01(seed, index) >= p;
}

}  // namespace shardalg::cuda
