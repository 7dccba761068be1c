// tests/support/testing.hpp — helpers shared by the tests: seeded random matrices (integer
// valued for bit-exact checks), the world sizes the laws run over, and per-rank collection so
// that assertions run on the test's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <type_traits>
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

namespace testing {

/// Rank r's summand of a Partial test operand: integer-valued, seeded by (seed, r). The dense
/// value is the sum over ranks, which `partial_dense` recomputes independently.
template <class T>
Mat<T> summand(Index r, Index c, std::uint64_t seed, int rank) {
  return random_int<T>(r, c, seed * 1000003ULL + static_cast<std::uint64_t>(rank) + 17);
}
template <class T>
Mat<T> partial_dense(Index r, Index c, std::uint64_t seed, int p) {
  Mat<T> sum = Mat<T>::Zero(r, c);
  for (int s = 0; s < p; ++s) sum += summand<T>(r, c, seed, s);
  return sum;
}

/// A test operand in layout L whose dense value is `dense_of<L>(…)` below. Replicated and split
/// layouts take their share of one seeded matrix; Partial gets per-rank summands.
template <class L, class T>
shardalg::Sharded<T, L> make_operand(shardalg::Group g, Index r, Index c, std::uint64_t seed) {
  if constexpr (std::is_same_v<L, shardalg::Partial>)
    return shardalg::Sharded<T, L>(summand<T>(r, c, seed, g.rank()), r, c, g);
  else
    return shardalg::shard<L>(random_int<T>(r, c, seed), g);
}
template <class L, class T>
Mat<T> dense_of(Index r, Index c, std::uint64_t seed, int p) {
  if constexpr (std::is_same_v<L, shardalg::Partial>) return partial_dense<T>(r, c, seed, p);
  else return random_int<T>(r, c, seed);
}

/// This rank's contribution to the pairing ⟨x, y⟩ of a primal value x and a cotangent y, on the
/// local blocks: Σ_r ⟨x_r, y_r⟩ is the dense pairing for (Row, Row), (C, C), (Partial, R) and
/// (R, Partial); a (R, R) pair is counted once, so each rank contributes 1/P of it.
template <class T, class LX, class LY>
double local_pairing(const shardalg::Sharded<T, LX>& x, const shardalg::Sharded<T, LY>& y) {
  const double dot = (x.local().template cast<double>().cwiseProduct(y.local().template cast<double>())).sum();
  constexpr bool both_r = std::is_same_v<LX, shardalg::Replicated> && std::is_same_v<LY, shardalg::Replicated>;
  return both_r ? dot / x.size() : dot;
}

}  // namespace testing

namespace testing {

using AllLayouts = std::tuple<shardalg::Replicated, shardalg::RowSharded, shardalg::ColSharded, shardalg::Partial>;

/// f(L{}) with the layout tag of a run-time kind (the random-program tests pick layouts at run time).
template <class F>
decltype(auto) with_layout(shardalg::LayoutKind k, F&& f) {
  switch (k) {
    case shardalg::LayoutKind::row: return f(shardalg::RowSharded{});
    case shardalg::LayoutKind::col: return f(shardalg::ColSharded{});
    case shardalg::LayoutKind::partial: return f(shardalg::Partial{});
    default: return f(shardalg::Replicated{});
  }
}
/// f(std::true_type{}) or f(std::false_type{}) for a run-time bool.
template <class F>
decltype(auto) with_bool(bool b, F&& f) {
  return b ? f(std::true_type{}) : f(std::false_type{});
}

/// Call `f.template operator()<A, B>()` for every ordered pair of the four layouts.
template <class F>
void for_each_layout_pair(F&& f) {
  auto row = [&]<class A>(A) {
    std::apply([&]<class... B>(B...) { (f.template operator()<A, B>(), ...); }, AllLayouts{});
  };
  std::apply([&]<class... A>(A... a) { (row(a), ...); }, AllLayouts{});
}

}  // namespace testing
