// tests/support/simd_paths.hpp — run a test body on each ISA path of backend/cpu/simd.hpp (scalar, and
// AVX2 + FMA where the CPU has it), restoring the path the process had.
#pragma once

#include <doctest/doctest.h>

#include <shardalg/backend/cpu/simd.hpp>

namespace testing {

struct IsaGuard {
  shardalg::simd::Level saved = shardalg::simd::level();
  ~IsaGuard() { shardalg::simd::set_level(saved); }
};

/// Run `body` on the scalar path and, where the CPU has it, the AVX2 path.
template <class F>
void on_each_isa(F body) {
  IsaGuard g;
  namespace simd = shardalg::simd;
  for (auto l : {simd::Level::scalar, simd::Level::avx2}) {
    simd::set_level(l);
    if (simd::level() != l) continue;
    CAPTURE(simd::level_name());
    body();
  }
}

}  // namespace testing
