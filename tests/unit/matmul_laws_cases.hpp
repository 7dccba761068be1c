// tests/unit/matmul_laws_cases.hpp — one matmul law instance, the valid pairs it runs over, and the
// sweep over world sizes and transposes, shared by test_matmul_laws.cpp and test_matmul_laws_int.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include <doctest/doctest.h>

#include "testing.hpp"

namespace matmul_laws {

using namespace shardalg;
using testing::Mat;
using K = LayoutKind;

// One law instance: stored layouts SA, SB; TA/TB say whether the operand is used transposed.
// Effective shapes: op(A) is m×k, op(B) is k×n. Returns the max abs error of every rank.
template <class T, class SA, class SB, bool TA, bool TB>
double matmul_law(int p, Index m, Index k, Index n, std::uint64_t seed) {
  constexpr K ea = TA ? transpose(SA::kind) : SA::kind;
  constexpr K eb = TB ? transpose(SB::kind) : SB::kind;
  static_assert(matmul_rule(ea, eb).valid);
  const Index ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
  Mat<T> A = testing::dense_of<SA, T>(ar, ac, seed, p);
  Mat<T> B = testing::dense_of<SB, T>(br, bc, seed + 1, p);
  Mat<T> Aeff = TA ? Mat<T>(A.transpose()) : A;
  Mat<T> Beff = TB ? Mat<T>(B.transpose()) : B;
  const Mat<T> expected = Aeff * Beff;  // the dense reference: plain Eigen on whole matrices
  auto errs = testing::per_rank<double>(p, [&](Group g) {
    auto a = testing::make_operand<SA, T>(g, ar, ac, seed);
    auto b = testing::make_operand<SB, T>(g, br, bc, seed + 1);
    auto c = [&] {
      if constexpr (TA && TB) return matmul(transpose(a), transpose(b));
      else if constexpr (TA) return matmul(transpose(a), b);
      else if constexpr (TB) return matmul(a, transpose(b));
      else return matmul(a, b);
    }();
    static_assert(decltype(c)::layout::kind == matmul_rule(ea, eb).result);
    return compare(c, expected).max_abs;
  });
  return *std::max_element(errs.begin(), errs.end());
}

// Every (stored A, stored B, transpose flags) whose effective pair is valid.
template <class T, bool TA, bool TB, class SA, class SB>
void one_pair(int p, std::uint64_t seed, int& checked) {
  constexpr K ea = TA ? transpose(SA::kind) : SA::kind;
  constexpr K eb = TB ? transpose(SB::kind) : SB::kind;
  if constexpr (matmul_rule(ea, eb).valid) {
    // Shapes: every dimension a multiple of p (sharded dims must divide), varied per seed.
    const Index m = p * (1 + seed % 3), k = p * (2 + seed % 2), n = p * (1 + (seed / 3) % 3);
    CAPTURE(p);
    CAPTURE(notation(ea));
    CAPTURE(notation(eb));
    CAPTURE(TA);
    CAPTURE(TB);
    CHECK(matmul_law<T, SA, SB, TA, TB>(p, m, k, n, seed) == 0.0);
    ++checked;
  }
}

template <class T, bool TA, bool TB>
void all_pairs(int p, std::uint64_t seed, int& checked) {
  testing::for_each_layout_pair([&]<class SA, class SB>() { one_pair<T, TA, TB, SA, SB>(p, seed, checked); });
}

// The body of "matmul laws over every valid layout pair, transposes and world sizes" for one
// element type T.
template <class T>
void every_law() {
  int checked = 0;
  for (int p : testing::world_sizes) {
    const std::uint64_t seed = 100 + p;
    all_pairs<T, false, false>(p, seed, checked);
    all_pairs<T, true, false>(p, seed + 7, checked);
    all_pairs<T, false, true>(p, seed + 13, checked);
    all_pairs<T, true, true>(p, seed + 19, checked);
  }
  // 8 valid effective pairs (R·R, R·Row, R·C, R·Partial, Row·R, C·R, C·Row, Partial·R) × 4 transpose combinations × 5 world sizes.
  CHECK(checked == 8 * 4 * 5);
}

}  // namespace matmul_laws
