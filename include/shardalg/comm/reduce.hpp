// shardalg/comm/reduce.hpp — the host arithmetic of a reduction across ranks, shared by the
// thread world (comm/thread.hpp) and MpiComm's reproducible mode (comm/mpi.hpp), so that both add
// in the same order with the same operations and give the same bits.
#pragma once

#include <cstddef>

#include "shardalg/base/dtype.hpp"
#include "shardalg/comm/communicator.hpp"

namespace shardalg::detail {

/// acc[i] := acc[i] ∘ x[i] for the 16-bit storage types: each sum is formed in fp32 from the two
/// 16-bit operands and rounded to the storage type once, acc[i] = T(float(acc[i]) + float(x[i]));
/// the running sum is stored in T between adds. The callers add the sources in rank order
/// 0, 1, …, P−1, so a sum of P partials is P − 1 such adds, each with relative error at most
/// u(fp32) + u(T) + u(fp32)·u(T) (precision/bounds.hpp, `partial_sum_bound`, model each_add).
template <HostHalf T>
void accumulate(T* acc, const T* x, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
      break;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
      break;
    default:
      for (std::size_t i = 0; i < n; ++i) acc[i] = T(static_cast<float>(acc[i]) + static_cast<float>(x[i]));
  }
}

/// acc[i] := acc[i] ∘ x[i], one loop per operation so that each vectorises.
template <class T>
void accumulate(T* acc, const T* x, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
      break;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
      break;
    default:
      for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

/// Elements per tile of a reduction: the running sum stays in L1.
inline constexpr std::size_t reduce_tile_bytes = 16384;

/// acc[i] := acc[i] ∘ x[i] for the element tags above this layer (DType bound_*, the running
/// bound's elements): precision/element.hpp registers it; until then such a tag is refused.
using ExtraAccumulate = void (*)(void* acc, const void* x, std::size_t n, DType t, ReduceOp op);
inline ExtraAccumulate& extra_accumulate() {
  static ExtraAccumulate f = nullptr;
  return f;
}

}  // namespace shardalg::detail
