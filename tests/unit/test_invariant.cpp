// The Invariant layout (issue 13): I holds the same value on every rank, as R does, but its
// cotangent is I (every rank computes the whole gradient). Tested here:
//   - the rule tables' I rows and columns, against the table written out by hand;
//   - the conversions f = copy_to (I → R), g = all_reduce<Invariant> (Partial → I),
//     all_gather<Invariant> (V → I), split from I, to_partial from I: equal to dense, bit-exact on
//     integer-valued operands, each ledgered as its collective (or not at all when free);
//   - the adjoint laws ⟨op(x), y⟩ = ⟨x, op*(y)⟩ of the typed table (docs/design.md §5a), with the
//     pairing of a (I, I) pair counted once, and a wrong adjoint breaking the law;
//   - the ops inside the invariant world: local, equal to dense, no collective.
// World sizes 1, 2, 3, 4, 8 on threads; f64, f32, i32, i64; random shapes.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <tuple>

#include <shardalg/shardalg.hpp>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;
using testing::random_int;

namespace {

using K = LayoutKind;
constexpr K kinds[] = {K::replicated, K::row, K::col, K::partial, K::invariant};

/// The pairing of a value and a cotangent on the local blocks, summed over ranks by the caller:
/// Σ_r ⟨x_r, y_r⟩ for every pair except (I, I), which every rank holds whole: counted once.
template <class T, class LX, class LY>
double pairing(const Sharded<T, LX>& x, const Sharded<T, LY>& y) {
  const double dot = (x.local().template cast<double>().cwiseProduct(y.local().template cast<double>())).sum();
  constexpr bool both_i = std::is_same_v<LX, Invariant> && std::is_same_v<LY, Invariant>;
  return both_i ? (x.rank() == 0 ? dot : 0.0) : dot;
}

/// Σ over ranks of each rank's value (run on the test's thread after run_ranks).
double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

struct Shape {
  Index rows, cols;
};
/// A random shape whose both dimensions divide by p (1..3 blocks of 1..3 each).
Shape random_shape(int p, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> d(1, 3);
  return {static_cast<Index>(p * d(gen)), static_cast<Index>(p * d(gen))};
}

}  // namespace

TEST_CASE("invariant: the rule tables' I rows and columns (written out by hand)") {
  for (K other : kinds) {
    CAPTURE(notation(other));
    const bool both = other == K::invariant;
    // matmul: I · I → I; I with anything else is E170, in either operand order.
    for (const auto& r : {matmul_rule(K::invariant, other), matmul_rule(other, K::invariant)}) {
      CHECK(r.valid == both);
      if (both) CHECK(r.result == K::invariant);
      else CHECK(r.error == Diag::invariant_mix);
    }
    for (const auto& r : {rules::add(K::invariant, other), rules::add(other, K::invariant),
                          rules::hadamard(K::invariant, other), rules::hadamard(other, K::invariant)}) {
      CHECK(r.valid == both);
      if (both) CHECK(r.result == K::invariant);
      else CHECK(r.error == Diag::invariant_mix);
    }
    // bias: X[I] takes b[I] only; b[I] goes on X[I] only (X[Partial] keeps its own E111).
    const auto xb = rules::bias(K::invariant, other);
    CHECK(xb.valid == both);
    if (!both) CHECK(xb.error == Diag::invariant_mix);
    const auto bx = rules::bias(other, K::invariant);
    CHECK(bx.valid == both);
    if (!both) CHECK(bx.error == (other == K::partial ? Diag::bias_partial : Diag::invariant_mix));
  }
  // Unary rules: I stays I (non-linear maps, row-wise ops, column and row sums, scaling).
  CHECK(rules::nonlinear(K::invariant).valid);
  CHECK(rules::nonlinear(K::invariant).result == K::invariant);
  CHECK(rules::rowwise(K::invariant).valid);
  CHECK(rules::col_sum(K::invariant).result == K::invariant);
  CHECK(rules::row_sum(K::invariant).result == K::invariant);
  CHECK(rules::scale(K::invariant).result == K::invariant);
  // The cotangent table: cot(R) = Partial, cot(I) = I, cot(Partial) = R, cot(Row) = Row, cot(C) = C.
  CHECK(cotangent(K::replicated) == K::partial);
  CHECK(cotangent(K::invariant) == K::invariant);
  CHECK(cotangent(K::partial) == K::replicated);
  CHECK(cotangent(K::row) == K::row);
  CHECK(cotangent(K::col) == K::col);
  CHECK(transpose(K::invariant) == K::invariant);
  CHECK(notation(K::invariant) == "I");
  CHECK(name(K::invariant) == "Invariant");
}

TEST_CASE_TEMPLATE("invariant: f, g, all_gather<I>, split and to_partial from I equal dense; the ledger names each",
                   T, double, float, std::int32_t, std::int64_t) {
  std::mt19937_64 gen(13);
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Shape s = random_shape(p, gen);
    const auto seed = static_cast<std::uint64_t>(gen());
    const Mat<T> a = random_int<T>(s.rows, s.cols, seed);
    const Mat<T> sum = testing::partial_dense<T>(s.rows, s.cols, seed, p);
    run_ranks(p, [&](ThreadComm& comm) {
      Ledger ledger;
      Group g = ledgered(comm, ledger);
      const int r = g.rank();
      // f: I → R, identity forward, nothing recorded.
      auto h = shard<Invariant>(a, g);
      Sharded<T, Replicated> x = copy_to(h);
      CHECK(x.local() == a);
      CHECK(ledger.count() == 0);
      // split from I: each rank's block, free; to_partial from I: rank 0 keeps it.
      auto hr = split<RowSharded>(h);
      CHECK(hr.local() == a.middleRows(r * (s.rows / p), s.rows / p));
      auto hc = split<ColSharded>(h);
      CHECK(hc.local() == a.middleCols(r * (s.cols / p), s.cols / p));
      auto hp = to_partial(h);
      CHECK(to_dense(hp) == a);  // to_dense's all_reduce is verification traffic: not recorded
      // R → I, free: the same block, now typed as whole-gradient.
      Sharded<T, Invariant> ri = to_invariant(shard<Replicated>(a, g));
      CHECK(ri.local() == a);
      CHECK(ledger.count() == 0);
      // g: Partial → I, one all_reduce recorded Partial -> I.
      Sharded<T, Partial> z(testing::summand<T>(s.rows, s.cols, seed, r), s.rows, s.cols, g);
      Sharded<T, Invariant> zi = all_reduce<Invariant>(z);
      CHECK(zi.local() == sum);
      Sharded<T, Invariant> zi2 = reduce_from<Invariant>(z);
      CHECK(zi2.local() == sum);
      // all_gather<I>: V → I, one all_gather recorded Row -> I (and C -> I).
      Sharded<T, Invariant> gr = all_gather<Invariant>(hr);
      Sharded<T, Invariant> gc = all_gather<Invariant>(hc);
      CHECK(gr.local() == a);
      CHECK(gc.local() == a);
      const auto e = ledger.entries();
      REQUIRE(e.size() == 4);
      CHECK(e[0].kind == CollectiveKind::all_reduce);
      CHECK(e[0].layout_in == "Partial");
      CHECK(e[0].layout_out == "I");
      CHECK(e[0].elements == static_cast<std::size_t>(s.rows * s.cols));
      CHECK(e[1].layout_out == "I");
      CHECK(e[2].kind == CollectiveKind::all_gather);
      CHECK(e[2].layout_in == "Row");
      CHECK(e[2].layout_out == "I");
      CHECK(e[3].layout_in == "C");
      CHECK(replicas_agree(zi));
    });
  }
}

TEST_CASE("invariant: the adjoint laws of the typed table hold exactly; the layers' R convention breaks them") {
  std::mt19937_64 gen(170);
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Shape s = random_shape(p, gen);
    const auto seed = static_cast<std::uint64_t>(gen());
    const Mat<double> a = random_int<double>(s.rows, s.cols, seed), b = random_int<double>(s.rows, s.cols, seed + 1);
    std::vector<double> lhs_f(p), rhs_f(p), lhs_g(p), rhs_g(p), lhs_r(p), rhs_r(p), wrong_r(p), lhs_ag(p), rhs_ag(p),
        lhs_sp(p), rhs_sp(p), lhs_ti(p), rhs_ti(p);
    run_ranks(p, [&](ThreadComm& comm) {
      Group g(comm);
      const int r = g.rank();
      // f = copy_to: I → R; its adjoint all_reduce<Invariant>: Partial → I.
      auto x = shard<Invariant>(a, g);
      Sharded<double, Partial> dy(testing::summand<double>(s.rows, s.cols, seed + 2, r), s.rows, s.cols, g);
      lhs_f[r] = pairing(copy_to(x), dy);                            // (R, Partial)
      rhs_f[r] = pairing(x, adjoint::copy_to<Invariant>(dy));        // (I, I), once
      // g = all_reduce<Invariant>: Partial → I; its adjoint: identity I → R.
      Sharded<double, Partial> z(testing::summand<double>(s.rows, s.cols, seed + 3, r), s.rows, s.cols, g);
      auto dzi = shard<Invariant>(b, g);
      lhs_g[r] = pairing(all_reduce<Invariant>(z), dzi);              // (I, I), once
      rhs_g[r] = pairing(z, adjoint::all_reduce(dzi));                // (Partial, R)
      // all_reduce → R: its cotangent is Partial (cot(R) = Partial); adjoint: all_reduce → R.
      lhs_r[r] = pairing(all_reduce(z), dy);                          // (R, Partial)
      rhs_r[r] = pairing(z, adjoint::all_reduce(dy));                 // (Partial, R)
      // The layers' convention (an R cotangent read as whole: the identity) on the Partial
      // cotangent: each summand would get only its own rank's part, which breaks the law for P > 1.
      Sharded<double, Replicated> as_r(dy.local(), s.rows, s.cols, g);
      wrong_r[r] = pairing(z, adjoint::all_reduce(as_r));
      // all_gather<I>: Row → I; adjoint split (free) I → Row.
      auto xr = shard<RowSharded>(a, g);
      lhs_ag[r] = pairing(all_gather<Invariant>(xr), dzi);            // (I, I), once
      rhs_ag[r] = pairing(xr, split<RowSharded>(dzi));                // (Row, Row)
      // split from I: I → C; adjoint all_gather<I>: C → I.
      auto dyc = shard<ColSharded>(b, g);
      lhs_sp[r] = pairing(split<ColSharded>(x), dyc);                 // (C, C)
      rhs_sp[r] = pairing(x, adjoint::split<Invariant>(dyc));         // (I, I), once
      // to_invariant: R → I; its adjoint puts the whole cotangent on rank 0: to_partial (I → Partial).
      auto xr2 = shard<Replicated>(a, g);
      lhs_ti[r] = pairing(to_invariant(xr2), dzi);                    // (I, I), once
      rhs_ti[r] = pairing(xr2, to_partial(Sharded<double, Replicated>(dzi.local(), s.rows, s.cols, g)));  // (R, Partial)
    });
    CHECK(total(lhs_f) == total(rhs_f));
    CHECK(total(lhs_g) == total(rhs_g));
    CHECK(total(lhs_r) == total(rhs_r));
    CHECK(total(lhs_ag) == total(rhs_ag));
    CHECK(total(lhs_sp) == total(rhs_sp));
    CHECK(total(lhs_ti) == total(rhs_ti));
    // The operands are nonzero integers, so the law is not 0 = 0 by accident.
    CHECK(total(lhs_f) != 0);
    if (p > 1) CHECK(total(wrong_r) != total(lhs_r));
  }
}

TEST_CASE_TEMPLATE("invariant: ops inside the invariant world are local and equal dense", T, double, std::int64_t) {
  std::mt19937_64 gen(7);
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index m = 1 + static_cast<Index>(gen() % 5), k = 1 + static_cast<Index>(gen() % 5), n = 1 + static_cast<Index>(gen() % 5);
    const auto seed = static_cast<std::uint64_t>(gen());
    const Mat<T> a = random_int<T>(m, k, seed), b = random_int<T>(k, n, seed + 1), c = random_int<T>(m, k, seed + 2);
    const Mat<T> bias = random_int<T>(1, k, seed + 3);
    run_ranks(p, [&](ThreadComm& comm) {
      Ledger ledger;
      Group g = ledgered(comm, ledger);
      auto ai = shard<Invariant>(a, g), bi = shard<Invariant>(b, g), ci = shard<Invariant>(c, g);
      Sharded<T, Invariant> prod = matmul(ai, bi);
      Mat<T> want = a * b;  // dense, Eigen's own product
      CHECK(prod.local() == want);
      Sharded<T, Invariant> tprod = matmul(transpose(ai), ci);  // Aᵀ · C
      want = a.transpose() * c;
      CHECK(tprod.local() == want);
      CHECK((ai + ci).local() == Mat<T>(a + c));
      CHECK((ai - ci).local() == Mat<T>(a - c));
      CHECK(hadamard(ai, ci).local() == Mat<T>(a.cwiseProduct(c)));
      CHECK(map(ai, [](T v) { return v * v + T(1); }).local() == Mat<T>(a.unaryExpr([](T v) { return v * v + T(1); })));
      CHECK(add_bias(ai, shard<Invariant>(bias, g)).local() == Mat<T>(a.rowwise() + bias.row(0)));
      CHECK(col_sum(ai).local() == Mat<T>(a.colwise().sum()));
      CHECK(row_sum(ai).local() == Mat<T>(a.rowwise().sum()));
      Sharded<T, Invariant> total = sum(ai);
      CHECK(total.local()(0, 0) == a.sum());
      CHECK(ledger.count() == 0);  // nothing communicates inside the invariant world
    });
  }
}

TEST_CASE("invariant: softmax_rows on I is the dense softmax on every rank") {
  const Mat<double> a = testing::random_real<double>(5, 7, 3);
  Mat<double> want = a;
  for (Index i = 0; i < a.rows(); ++i) {
    const double mx = a.row(i).maxCoeff();
    double s = 0;
    for (Index j = 0; j < a.cols(); ++j) s += std::exp(a(i, j) - mx);
    for (Index j = 0; j < a.cols(); ++j) want(i, j) = std::exp(a(i, j) - mx) / s;
  }
  for (int p : {1, 3}) {
    run_ranks(p, [&](ThreadComm& comm) {
      Sharded<double, Invariant> y = softmax_rows(shard<Invariant>(a, Group(comm)));
      CHECK((y.local() - want).cwiseAbs().maxCoeff() <= 1e-15);
    });
  }
}

TEST_CASE("invariant: shard<Invariant> checks the replicas like shard<Replicated>") {
  ReplicaCheck on(true);
  CHECK_THROWS_WITH_AS(run_ranks(2,
                                 [](ThreadComm& comm) {
                                   const Mat<double> a = Mat<double>::Constant(2, 2, comm.rank());
                                   (void)shard<Invariant>(a, Group(comm));
                                 }),
                       "shard<Invariant>: rank 1's 2x2 matrix differs from rank 0's; a Replicated tensor must hold the "
                       "same value on every rank: build it from the same data on every rank, or broadcast one rank's "
                       "with distribute<Replicated>(A, group, src_rank)",
                       ReplicaMismatchError);
}
