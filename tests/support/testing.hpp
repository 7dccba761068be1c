// tests/support/testing.hpp — helpers shared by the tests: seeded random matrices (integer
// valued for bit-exact checks), the world sizes the laws run over, and per-rank collection so
// that assertions run on the test's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "shardalg/shardalg.hpp"

namespace testing {

using shardalg::Index;
template <class T>
using Mat = shardalg::CpuBackend::matrix<T>;

inline const std::vector<int> world_sizes = {1, 2, 3, 4, 8};

/// A matrix of small integers in [-4, 4], exactly representable in every element type, so that
/// sums and products of modest size are exact in float and double alike.
template <class T>
Mat<T> random_int(Index r, Index c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  Mat<T> m(r, c);
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = static_cast<T>(d(gen));
  return m;
}

/// A matrix of uniform reals in [-1, 1).
template <class T>
Mat<T> random_real(Index r, Index c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Mat<T> m(r, c);
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = static_cast<T>(d(gen));
  return m;
}

/// Run `fn(group)` on `p` thread ranks and return each rank's result, indexed by rank.
template <class R, class Fn>
std::vector<R> per_rank(int p, Fn&& fn) {
  std::vector<R> out(p);
  shardalg::run_ranks(p, [&](shardalg::ThreadComm& comm) { out[comm.rank()] = fn(shardalg::Group(comm)); });
  return out;
}

}  // namespace testing
