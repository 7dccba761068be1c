// tests/support/test_pch.hpp — the headers nearly every test translation unit reads, compiled once
// per Clang build into a precompiled header that each test target loads before its own text
// (tests/CMakeLists.txt, shardalg_test_pch). A test file still includes what it uses, as a user's
// file would; with the header loaded those includes are no-ops (#pragma once). Under Clang -O0 it
// saves the parse, about 2.4 CPU-s per test file; under GCC -O1 it saved 8 % of the test files' CPU
// and cost 170–430 MB of peak memory each, so GCC builds without it (docs/testing.md).
// -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns it off.
#pragma once

#include <doctest/doctest.h>

#include <shardalg/autodiff.hpp>
#include <shardalg/nn.hpp>
#include <shardalg/nn/models/data_parallel.hpp>
#include <shardalg/nn/models/pipeline_gpt.hpp>
#include <shardalg/reference/dense_layers.hpp>
#include <shardalg/shardalg.hpp>

#include "testing.hpp"
