// The matmul laws of test_matmul_laws.cpp over the integer element types, std::int32_t and std::int64_t.
#include <doctest/doctest.h>

#include <cstdint>

#include "matmul_laws_cases.hpp"

TEST_CASE_TEMPLATE("matmul laws over every valid layout pair, transposes and world sizes", T, std::int32_t, std::int64_t) {
  matmul_laws::every_law<T>();
}
