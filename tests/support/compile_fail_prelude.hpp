// tests/support/compile_fail_prelude.hpp — every header a compile-fail case includes, compiled
// once per compiler into a precompiled header (tests/CMakeLists.txt) that each case loads before
// its own text: a case then costs its own instantiations (under 1 s), not the parse of the
// library (3–10 s). The cases still include what they use, as a user's file would; with the
// prelude loaded those includes are no-ops (#pragma once).

#include <shardalg/shardalg.hpp>
#include <shardalg/autodiff.hpp>
#include <shardalg/nn.hpp>
#include <shardalg/nn/layers/conv2d.hpp>
#include <shardalg/nn/models/data_parallel.hpp>
