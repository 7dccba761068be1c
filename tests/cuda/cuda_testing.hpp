// tests/cuda/cuda_testing.hpp — the laws the CUDA backend must satisfy, written once over the
// backend B: the same functions run on CpuBackend over the host-memory simulated communicator
// (test_sim_protocol.cpp, no GPU needed) and on CudaBackend over the single-GPU simulated
// communicator (test_matmul_laws.cu, test_collectives.cu). Per-rank outcomes are collected and
// asserted on the test's own thread (doctest assertions are not thread-safe).
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "shardalg/core.hpp"

namespace ctest {

using shardalg::Index;
template <class T>
using Mat = shardalg::CpuBackend::matrix<T>;

/// Small integers in [-4, 4]: exact in every element type, so products and sums of the sizes
/// used here are exact in fp32 — the sharded result must equal the dense one bit for bit.
template <class T>
Mat<T> random_int(Index r, Index c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  Mat<T> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(d(gen));
  return m;
}
template <class T>
Mat<T> random_real(Index r, Index c, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  Mat<T> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(d(gen));
  return m;
}
template <class T>
Mat<T> summand(Index r, Index c, std::uint64_t seed, int rank) {
  return random_int<T>(r, c, seed * 1000003ULL + static_cast<std::uint64_t>(rank) + 17);
}
template <class T>
Mat<T> partial_dense(Index r, Index c, std::uint64_t seed, int p) {
  Mat<T> s = Mat<T>::Zero(r, c);
  for (int k = 0; k < p; ++k) s += summand<T>(r, c, seed, k);
  return s;
}

/// A backend matrix on the host (identity for the CPU backend, a download for CUDA).
template <class M>
auto host_of(const M& m) {
  if constexpr (requires { m.host(); }) return m.host();
  else return m;
}

/// An operand in layout L on backend B whose dense value is dense_of<L>(…).
template <class L, class T, class B>
shardalg::Sharded<T, L, B> make_operand(shardalg::Group g, Index r, Index c, std::uint64_t seed) {
  if constexpr (std::is_same_v<L, shardalg::Partial>)
    return shardalg::Sharded<T, L, B>(summand<T>(r, c, seed, g.rank()), r, c, g);
  else
    return shardalg::shard<L, Mat<T>, B>(random_int<T>(r, c, seed), g);
}
template <class L, class T>
Mat<T> dense_of(Index r, Index c, std::uint64_t seed, int p) {
  if constexpr (std::is_same_v<L, shardalg::Partial>) return partial_dense<T>(r, c, seed, p);
  else return random_int<T>(r, c, seed);
}

struct Outcome {
  std::string what;
  shardalg::ErrorReport err;
  bool ok = true;  // for boolean checks (replicas_agree)
};

/// Thread-safe collection of every rank's outcomes.
struct Outcomes {
  std::mutex m;
  std::vector<Outcome> all;
  void add(std::vector<Outcome> v) {
    std::lock_guard lk(m);
    for (auto& o : v) all.push_back(std::move(o));
  }
};

template <class F>
void for_each_layout(F&& f) {
  f.template operator()<shardalg::Replicated>();
  f.template operator()<shardalg::RowSharded>();
  f.template operator()<shardalg::ColSharded>();
  f.template operator()<shardalg::Partial>();
}

/// One matmul form: op(A)·op(B) with A stored in LA, B in LB; TA/TB: operand seen transposed.
template <class B, class T, class LA, class LB, bool TA, bool TB>
void matmul_form(shardalg::Group g, std::vector<Outcome>& out, Index m, Index k, Index n, std::uint64_t seed) {
  using namespace shardalg;
  constexpr LayoutKind ka = TA ? transpose(LA::kind) : LA::kind;
  constexpr LayoutKind kb = TB ? transpose(LB::kind) : LB::kind;
  constexpr MatmulRule rule = matmul_rule(ka, kb);
  if constexpr (rule.valid) {
    const int p = g.size();
    const Index ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
    auto a = make_operand<LA, T, B>(g, ar, ac, seed);
    auto b = make_operand<LB, T, B>(g, br, bc, seed + 1);
    const Mat<double> Ad = dense_of<LA, T>(ar, ac, seed, p).template cast<double>();
    const Mat<double> Bd = dense_of<LB, T>(br, bc, seed + 1, p).template cast<double>();
    Mat<double> ref;
    if constexpr (TA && TB) ref = Ad.transpose() * Bd.transpose();
    else if constexpr (TA) ref = Ad.transpose() * Bd;
    else if constexpr (TB) ref = Ad * Bd.transpose();
    else ref = Ad * Bd;
    auto run = [&] {
      if constexpr (TA && TB) return matmul(transpose(a), transpose(b));
      else if constexpr (TA) return matmul(transpose(a), b);
      else if constexpr (TB) return matmul(a, transpose(b));
      else return matmul(a, b);
    };
    auto c = run();
    static_assert(std::is_same_v<typename decltype(c)::layout, layout_t<rule.result>>);
    const Mat<double> got = host_of(to_dense(c)).template cast<double>();
    std::string what = detail::cat(LA::notation, TA ? "ᵀ" : "", " · ", LB::notation, TB ? "ᵀ" : "", " → ",
                                   notation(rule.result), " at P=", p, " rank ", g.rank());
    out.push_back({std::move(what), compare(got, ref)});
  }
}

/// Every valid layout pair in every transposition form (the whole rule table), m×k · k×n.
template <class B, class T>
std::vector<Outcome> matmul_laws(shardalg::Group g, Index m, Index k, Index n, std::uint64_t seed) {
  std::vector<Outcome> out;
  for_each_layout([&]<class LA>() {
    for_each_layout([&]<class LB>() {
      matmul_form<B, T, LA, LB, false, false>(g, out, m, k, n, seed);
      matmul_form<B, T, LA, LB, true, false>(g, out, m, k, n, seed + 10);
      matmul_form<B, T, LA, LB, false, true>(g, out, m, k, n, seed + 20);
      matmul_form<B, T, LA, LB, true, true>(g, out, m, k, n, seed + 30);
    });
  });
  return out;
}

/// The redistributions against dense: every collective of collective/*.hpp, r×c (both
/// divisible by the group size).
template <class B, class T>
std::vector<Outcome> collective_laws(shardalg::Group g, Index r, Index c, std::uint64_t seed) {
  using namespace shardalg;
  std::vector<Outcome> out;
  const int p = g.size();
  const auto tag = [&](std::string_view what) { return detail::cat(what, " at P=", p, " rank ", g.rank()); };
  const Mat<T> dense = random_int<T>(r, c, seed);
  const Mat<T> pdense = partial_dense<T>(r, c, seed + 1, p);
  auto check = [&](std::string_view what, const auto& x, const Mat<T>& ref) {
    out.push_back({tag(what), compare(host_of(to_dense(x)), ref)});
  };
  {
    auto z = make_operand<Partial, T, B>(g, r, c, seed + 1);
    auto y = all_reduce(z);
    check("all_reduce Partial→R", y, pdense);
    out.push_back({tag("all_reduce replicas agree"), {}, replicas_agree(y)});
    out.push_back({tag("all_reduce local = dense"), compare(host_of(y.local()), pdense)});
    check("reduce_from Partial→R", reduce_from(make_operand<Partial, T, B>(g, r, c, seed + 1)), pdense);
    check("reduce_scatter Partial→Row", reduce_scatter<RowSharded>(z), pdense);
    check("reduce_scatter Partial→C", reduce_scatter<ColSharded>(z), pdense);
  }
  {
    auto xr = make_operand<RowSharded, T, B>(g, r, c, seed);
    auto xc = make_operand<ColSharded, T, B>(g, r, c, seed);
    auto x = make_operand<Replicated, T, B>(g, r, c, seed);
    out.push_back({tag("all_gather Row→R (local)"), compare(host_of(all_gather(xr).local()), dense)});
    out.push_back({tag("all_gather C→R (local)"), compare(host_of(all_gather(xc).local()), dense)});
    check("split R→Row", split<RowSharded>(x), dense);
    check("split R→C", split<ColSharded>(x), dense);
    check("all_to_all Row→C", all_to_all<ColSharded>(xr), dense);
    check("all_to_all C→Row", all_to_all<RowSharded>(xc), dense);
    check("copy_to R→R", copy_to(x), dense);
    // The local block of a split layout is exactly the dense block (no gathering involved).
    const auto [lr, lc] = local_shape(LayoutKind::col, r, c, p, g.rank());
    out.push_back({tag("shard C local block"), compare(host_of(xc.local()), Mat<T>(dense.middleCols(block_offset(c, p, g.rank()), lc)))});
    (void)lr;
    // Adjoint law: ⟨all_gather(x), y⟩ = ⟨x, reduce_scatter(y)⟩ for x[Row], y[Partial].
    auto yp = make_operand<Partial, T, B>(g, r, c, seed + 2);
    const Mat<double> ag = host_of(to_dense(all_gather(xr))).template cast<double>();
    const Mat<double> yd = partial_dense<T>(r, c, seed + 2, p).template cast<double>();
    const Mat<double> rs = host_of(to_dense(reduce_scatter<RowSharded>(yp))).template cast<double>();
    const double lhs = ag.cwiseProduct(yd).sum(), rhs = dense.template cast<double>().cwiseProduct(rs).sum();
    Mat<double> l(1, 1), rr(1, 1);
    l(0, 0) = lhs;
    rr(0, 0) = rhs;
    out.push_back({tag("adjoint ⟨all_gather x, y⟩ = ⟨x, reduce_scatter y⟩"), compare(l, rr)});
  }
  return out;
}

}  // namespace ctest
