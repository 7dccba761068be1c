// shardalg/backend/block_check.hpp — the bounds check of a device backend's copy_block and
// paste_block (CUDA's, the emulated device's), one text for all: a block read or written past its
// matrix is a ShapeError naming both shapes, not a stray copy in memory the host cannot see.
// CpuBackend leaves it to Eigen's block() assertions.
#pragma once

#include <string_view>

#include "shardalg/base/errors.hpp"
#include "shardalg/base/index.hpp"

namespace shardalg::detail {

/// Throws ShapeError unless the r × c block at (r0, c0) lies inside a rows × cols matrix.
inline void check_block_inside(std::string_view op, Index r0, Index c0, Index r, Index c, Index rows, Index cols) {
  if (r0 < 0 || c0 < 0 || r < 0 || c < 0 || r0 + r > rows || c0 + c > cols)
    throw ShapeError(cat(op, ": block ", r, "x", c, " at (", r0, ", ", c0, ") is outside a ", rows, "x", cols,
                         " matrix"));
}

}  // namespace shardalg::detail
