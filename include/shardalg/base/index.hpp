// shardalg/base/index.hpp — the index type of shapes and offsets: Eigen's (std::ptrdiff_t unless
// EIGEN_DEFAULT_DENSE_INDEX_TYPE says otherwise), named here so that the floors below the CPU
// backend need not include Eigen. backend/cpu/backend.hpp asserts that the two agree.
#pragma once

#include <cstddef>

namespace shardalg {

#if defined(EIGEN_DEFAULT_DENSE_INDEX_TYPE)
using Index = EIGEN_DEFAULT_DENSE_INDEX_TYPE;
#else
using Index = std::ptrdiff_t;
#endif

}  // namespace shardalg
