// tests/plan/plan_cases.hpp — the laws of matmul<To> and redistribute<To>, run on one rank of a
// group (threads or MPI), and an independent brute-force search for the cheapest plan.
//
// Every case reports failures as text (the thread tests collect them per rank and assert on the
// test's thread; the MPI tests assert on each rank). Operands are integer-valued, so every
// product and sum is exact: results are compared bit for bit with the dense product.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "testing.hpp"

namespace plan_cases {

using namespace shardalg;
using testing::Mat;
using K = LayoutKind;

// ---------------------------------------------------------------------------------------------
// The specification, typed in by hand (not read from the planner): the redistribution steps,
// the valid local products (ALGEBRA.md's matmul table) and which GEMM dimensions they split.
// ---------------------------------------------------------------------------------------------

struct SpecStep {
  K from, to;
  std::string_view kind;  // as the ledger spells it; "split" / "to_partial" do not communicate
  bool comm;
};
inline constexpr SpecStep spec_steps[] = {
    {K::replicated, K::row, "split", false},      {K::replicated, K::col, "split", false},
    {K::replicated, K::partial, "to_partial", false}, {K::row, K::replicated, "all_gather", true},
    {K::col, K::replicated, "all_gather", true},  {K::row, K::col, "all_to_all", true},
    {K::col, K::row, "all_to_all", true},         {K::row, K::partial, "to_partial", false},
    {K::col, K::partial, "to_partial", false},    {K::partial, K::replicated, "all_reduce", true},
    {K::partial, K::row, "reduce_scatter", true}, {K::partial, K::col, "reduce_scatter", true},
};

struct SpecProduct {
  K a, b, z;
  bool split_m, split_k, split_n;
};
inline constexpr SpecProduct spec_products[] = {
    {K::replicated, K::replicated, K::replicated, false, false, false},
    {K::replicated, K::row, K::partial, false, true, false},
    {K::replicated, K::col, K::col, false, false, true},
    {K::replicated, K::partial, K::partial, false, false, false},
    {K::row, K::replicated, K::row, true, false, false},
    {K::col, K::replicated, K::partial, false, true, false},
    {K::col, K::row, K::partial, false, true, false},
    {K::partial, K::replicated, K::partial, false, false, false},
};

// Every layout holds every shape: a split that does not divide gives blocks of ⌊n/p⌋ and ⌊n/p⌋ + 1.
inline bool fits(K, Index, Index, int) { return true; }

/// The largest block of n on p ranks, the one the slowest rank holds and moves.
inline double largest_block(Index n, int p) { return double(n / p + (n % p != 0 ? 1 : 0)); }

/// A step is priced as if every block were the largest: the split dimension counts p·⌈n/p⌉.
inline double spec_step_seconds(const SpecStep& s, Index r, Index c, int p, std::size_t eb, const plan::Model& m) {
  const bool rs = s.from == K::row || s.to == K::row, cs = s.from == K::col || s.to == K::col;
  const double v = (rs ? p * largest_block(r, p) : double(r)) * (cs ? p * largest_block(c, p) : double(c)) * double(eb);
  if (s.kind == "all_gather") return cost::all_gather_seconds(m.link, v, p);
  if (s.kind == "all_to_all") return cost::all_to_all_seconds(m.link, v, p);
  if (s.kind == "all_reduce") return cost::all_reduce_seconds(m.link, v, p);
  if (s.kind == "reduce_scatter") return cost::reduce_scatter_seconds(m.link, v, p);
  return 0.0;
}

/// Every sequence of ≤ `depth` spec steps from `from` (the layouts fitting r × c): calls
/// f(end layout, seconds, collectives).
inline void sequences(K from, Index r, Index c, int p, std::size_t eb, const plan::Model& m, int depth,
                      const std::function<void(K, double, int)>& f, double acc = 0, int coll = 0) {
  f(from, acc, coll);
  if (depth == 0) return;
  for (const auto& s : spec_steps)
    if (s.from == from && fits(s.to, r, c, p))
      sequences(s.to, r, c, p, eb, m, depth - 1, f, acc + spec_step_seconds(s, r, c, p, eb, m),
                coll + (s.comm ? 1 : 0));
}

/// The cheapest modelled cost over every plan with at most `max_coll` collectives: up to 2 steps
/// on each operand, any valid local product, up to 2 steps on the result.
inline std::optional<double> brute_force_matmul(K a, K b, K to, Index m, Index k, Index n, int p, std::size_t eb,
                                                const plan::Model& model, int max_coll = 2) {
  std::optional<double> best;
  sequences(a, m, k, p, eb, model, 2, [&](K a2, double ca, int na) {
    sequences(b, k, n, p, eb, model, 2, [&](K b2, double cb, int nb) {
      for (const auto& pr : spec_products) {
        if (pr.a != a2 || pr.b != b2 || !fits(pr.z, m, n, p)) continue;
        const double flops = 2.0 * (pr.split_m ? largest_block(m, p) : double(m)) *
                             (pr.split_k ? largest_block(k, p) : double(k)) * (pr.split_n ? largest_block(n, p) : double(n));
        sequences(pr.z, m, n, p, eb, model, 2, [&](K z2, double cz, int nz) {
          if (z2 != to || na + nb + nz > max_coll) return;
          const double total = ca + cb + cz + flops / model.flops_per_second;
          if (!best || total < *best) best = total;
        });
      }
    });
  });
  return best;
}

inline std::optional<double> brute_force_redistribute(K from, K to, Index r, Index c, int p, std::size_t eb,
                                                      const plan::Model& model) {
  std::optional<double> best;
  sequences(from, r, c, p, eb, model, 2, [&](K end, double s, int) {
    if (end == to && (!best || s < *best)) best = s;
  });
  return best;
}

/// The modelled cost of a plan recomputed from the spec tables (so the planner cannot misreport).
inline double spec_chain_seconds(const plan::Chain& ch, Index r, Index c, int p, std::size_t eb, const plan::Model& m) {
  double s = 0;
  for (int i = 0; i < ch.steps; ++i)
    for (const auto& st : spec_steps)
      if (st.from == ch.at[std::size_t(i)] && st.to == ch.at[std::size_t(i) + 1]) s += spec_step_seconds(st, r, c, p, eb, m);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The ledger a plan must leave: one entry per communicating step, in order, with its layouts
// (of the stored tensor: a chain on a transpose view runs on the tensor under it) and its V.
// ---------------------------------------------------------------------------------------------

struct Expected {
  std::string kind, in, out;
  std::size_t elements;
};

inline void expect_chain(std::vector<Expected>& out, const plan::Chain& ch, Index r, Index c, bool trans) {
  for (int i = 0; i < ch.steps; ++i) {
    const plan::StepKind s = ch.step(i);
    if (!plan::communicates(s)) continue;
    K from = ch.at[std::size_t(i)], to = ch.at[std::size_t(i) + 1];
    if (trans) from = transpose(from), to = transpose(to);
    out.push_back({std::string(plan::to_string(s)), std::string(notation(from)), std::string(notation(to)),
                   std::size_t(r * c)});
  }
}

inline std::string ledger_diff(const std::vector<LedgerEntry>& got, std::size_t from, const std::vector<Expected>& want) {
  std::string d;
  if (got.size() - from != want.size())
    return "ledger has " + std::to_string(got.size() - from) + " entries, plan has " + std::to_string(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& g = got[from + i];
    const auto& w = want[i];
    if (std::string(to_string(g.kind)) != w.kind || g.layout_in != w.in || g.layout_out != w.out ||
        g.elements != w.elements)
      d += "entry " + std::to_string(i) + ": got " + std::string(to_string(g.kind)) + " " + g.layout_in + "->" +
           g.layout_out + " x" + std::to_string(g.elements) + ", plan " + w.kind + " " + w.in + "->" + w.out + " x" +
           std::to_string(w.elements) + "; ";
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// The laws on one rank
// ---------------------------------------------------------------------------------------------

struct Report {
  std::vector<std::string> failures;
  int cases = 0;
  void fail(std::string s) { failures.push_back(std::move(s)); }
};

inline std::string name3(std::string_view a, std::string_view b, std::string_view to, bool ta, bool tb) {
  return std::string(a) + (ta ? "ᵀ" : "") + "·" + std::string(b) + (tb ? "ᵀ" : "") + "→" + std::string(to);
}

/// matmul<To>(op(A), op(B)) for stored layouts SA, SB: value, ledger, cost; then its adjoint.
template <class T, class SA, class SB, class To, bool TA, bool TB>
void matmul_case(Group g, Ledger& ledger, Index m, Index k, Index n, std::uint64_t seed, Report& rep) {
  const int p = g.size();
  const Index ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
  const Mat<T> A = testing::dense_of<SA, T>(ar, ac, seed, p), B = testing::dense_of<SB, T>(br, bc, seed + 1, p);
  const Mat<T> Ae = TA ? Mat<T>(A.transpose()) : A, Be = TB ? Mat<T>(B.transpose()) : B;
  const Mat<T> expected = Ae * Be;  // the dense reference: Eigen on the whole matrices
  auto a = testing::make_operand<SA, T>(g, ar, ac, seed);
  auto b = testing::make_operand<SB, T>(g, br, bc, seed + 1);
  const std::string what = name3(SA::notation, SB::notation, To::notation, TA, TB) + " P=" + std::to_string(p) +
                           " " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  auto opa = [&]() -> decltype(auto) {
    if constexpr (TA) return transpose(a);
    else return (a);
  };
  auto opb = [&]() -> decltype(auto) {
    if constexpr (TB) return transpose(b);
    else return (b);
  };
  const plan::Model model{};
  const plan::MatmulPlan pl = matmul_plan<To>(opa(), opb(), model);
  const std::size_t before = ledger.entries().size();
  auto c = matmul<To>(opa(), opb(), model);
  static_assert(std::is_same_v<typename decltype(c)::layout, To>);
  std::vector<Expected> want;
  expect_chain(want, pl.pre_a, ar, ac, TA);
  expect_chain(want, pl.pre_b, br, bc, TB);
  expect_chain(want, pl.post, m, n, false);
  const std::string d = ledger_diff(ledger.entries(), before, want);
  if (!d.empty()) rep.fail(what + ": " + d + " plan: " + plan::describe(pl));
  const double err = compare(c, expected).max_abs;
  if (err != 0.0) rep.fail(what + ": max abs error " + std::to_string(err) + " plan: " + plan::describe(pl));

  // Adjoint: dC in To's cotangent layout; dA, dB equal the dense formulas exactly.
  using CT = cotangent_t<To>;
  const Mat<T> DC = testing::dense_of<CT, T>(m, n, seed + 2, p);
  auto dc = testing::make_operand<CT, T>(g, m, n, seed + 2);
  auto grads = adjoint::matmul(opa(), opb(), dc, model);
  static_assert(std::is_same_v<typename decltype(grads.da)::layout, cotangent_t<SA>>);
  static_assert(std::is_same_v<typename decltype(grads.db)::layout, cotangent_t<SB>>);
  const Mat<T> dAe = DC * Be.transpose(), dBe = Ae.transpose() * DC;  // gradients of op(A), op(B)
  const Mat<T> dA = TA ? Mat<T>(dAe.transpose()) : dAe, dB = TB ? Mat<T>(dBe.transpose()) : dBe;
  if (compare(grads.da, dA).max_abs != 0.0) rep.fail(what + ": adjoint dA differs");
  if (compare(grads.db, dB).max_abs != 0.0) rep.fail(what + ": adjoint dB differs");
  ++rep.cases;
}

/// Every (SA, SB, To) and every transpose flag, at shapes that divide by P (multipliers from seed).
template <class T, bool TA, bool TB>
void all_matmul_cases(Group g, Ledger& ledger, std::uint64_t seed, Report& rep) {
  const int p = g.size();
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> d(1, 3);
  testing::for_each_layout_pair([&]<class SA, class SB>() {
    std::apply(
        [&]<class... To>(To...) {
          (matmul_case<T, SA, SB, To, TA, TB>(g, ledger, d(gen) * p, d(gen) * p, d(gen) * p, seed + 7, rep), ...);
        },
        testing::AllLayouts{});
  });
}

/// redistribute<To>(x[From]): value, ledger = plan, and the adjoint law with the local pairing.
template <class T, class From, class To>
void redistribute_case(Group g, Ledger& ledger, Index r, Index c, std::uint64_t seed, Report& rep) {
  const int p = g.size();
  const std::string what = std::string(From::notation) + "→" + std::string(To::notation) + " P=" + std::to_string(p) +
                           " " + std::to_string(r) + "x" + std::to_string(c);
  const Mat<T> X = testing::dense_of<From, T>(r, c, seed, p);
  auto x = testing::make_operand<From, T>(g, r, c, seed);
  const auto pl = redistribute_plan<To>(x);
  const std::size_t before = ledger.entries().size();
  auto y = redistribute<To>(x);
  static_assert(std::is_same_v<typename decltype(y)::layout, To>);
  std::vector<Expected> want;
  expect_chain(want, pl.chain, r, c, false);
  const std::string d = ledger_diff(ledger.entries(), before, want);
  if (!d.empty()) rep.fail(what + ": " + d);
  if (compare(y, X).max_abs != 0.0) rep.fail(what + ": value differs");

  // ⟨op(x), w⟩ = ⟨x, adjoint(w)⟩ for w in cot(To) — and in Partial when To = R (the R value fed
  // sharded work). Sums over ranks of the local pairings; integer-valued, so exact.
  auto law = [&]<class W>(W) {
    auto w = testing::make_operand<W, T>(g, r, c, seed + 3);
    auto back = adjoint::redistribute<From>(w);
    static_assert(std::is_same_v<typename decltype(back)::layout, cotangent_t<From>>);
    double lr[2] = {testing::local_pairing(y, w), testing::local_pairing(x, back)};
    g.all_reduce(lr, 2, ReduceOp::sum, CallInfo{"-", "-", true});
    // (R, R) pairs are counted as 1/P per rank, so a sum of P thirds may round: 1e-12 relative.
    if (std::abs(lr[0] - lr[1]) > 1e-12 * std::max(1.0, std::abs(lr[0])))
      rep.fail(what + ": adjoint law " + std::to_string(lr[0]) + " != " + std::to_string(lr[1]) + " (cotangent " +
               std::string(W::notation) + ")");
  };
  law(cotangent_t<To>{});
  if constexpr (std::is_same_v<To, Replicated>) law(Partial{});
  ++rep.cases;
}

template <class T>
void all_redistribute_cases(Group g, Ledger& ledger, std::uint64_t seed, Report& rep) {
  const int p = g.size();
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> d(1, 4);
  testing::for_each_layout_pair([&]<class From, class To>() {
    redistribute_case<T, From, To>(g, ledger, d(gen) * p, d(gen) * p, seed + 11, rep);
  });
}

// Both plan suites (plan_laws on threads, mpi_plan under mpirun) run these sweeps over a Group:
// plan_cases.cpp compiles them once for both (the sweeps are most of either suite's compile).
extern template void all_matmul_cases<double, false, false>(Group, Ledger&, std::uint64_t, Report&);
extern template void all_matmul_cases<double, true, false>(Group, Ledger&, std::uint64_t, Report&);
extern template void all_matmul_cases<double, false, true>(Group, Ledger&, std::uint64_t, Report&);
extern template void all_matmul_cases<double, true, true>(Group, Ledger&, std::uint64_t, Report&);
extern template void all_redistribute_cases<double>(Group, Ledger&, std::uint64_t, Report&);
extern template void all_redistribute_cases<float>(Group, Ledger&, std::uint64_t, Report&);

/// f(group, ledger, report) on p thread ranks, each group ledgered; every rank's failures become
/// failed checks on the test's thread, and at least one case must have run.
template <class F>
void on_ranks(int p, F&& f) {
  auto reports = testing::per_rank<Report>(p, [&](Group base) {
    Ledger ledger;
    Report rep;
    f(Group(ledgered(base, ledger)), ledger, rep);
    return rep;
  });
  int cases = 0;
  for (const auto& r : reports) {
    for (const auto& fl : r.failures) FAIL_CHECK(fl);
    cases += r.cases;
  }
  CHECK(cases > 0);
  MESSAGE("P=" << p << ": " << cases / p << " cases per rank");
}

}  // namespace plan_cases
