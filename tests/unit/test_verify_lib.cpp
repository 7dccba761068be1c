// The verify library (include/shardalg/verify/): a tally of a hand-built Ledger gives exact
// counts and bytes; a sharded ColumnParallelLinear checked against its dense twin passes, and
// fails once one weight entry is perturbed. Every expected value below is worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "shardalg/nn/layers/linear.hpp"
#include "shardalg/verify/verify.hpp"
#include "testing.hpp"

using namespace shardalg;
using Md = Eigen::MatrixXd;

namespace {

// Records without communicating: the ledger as the Ledgered decorator fills it.
void rec(Ledger& l, CollectiveKind k, std::size_t elements, DType t, bool verification = false) {
  l.record(k, elements, t, CallInfo{"R", "C", verification}, 2);
}

Md mat(Index r, Index c, std::initializer_list<double> v) {
  Md m(r, c);
  auto it = v.begin();
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = *it++;
  return m;
}

}  // namespace

TEST_CASE("verify::tally: a hand-built ledger, counted per kind and scope") {
  Ledger l;
  {
    auto f = l.scope("fwd");
    auto b0 = l.scope("block0");
    rec(l, CollectiveKind::all_reduce, 100, DType::f64);  // 800 bytes
    rec(l, CollectiveKind::all_reduce, 10, DType::f64);   //  80 bytes
    {
      auto a = l.scope("attn");
      rec(l, CollectiveKind::all_gather, 8, DType::f32);   //  32 bytes
    }
    rec(l, CollectiveKind::all_reduce, 1000, DType::f64, true);  // verification: not recorded
  }
  {
    auto b = l.scope("bwd");
    auto b0 = l.scope("block0");
    rec(l, CollectiveKind::reduce_scatter, 16, DType::f64);  // 128 bytes
  }
  {
    auto b = l.scope("fwd_extra");  // not inside "fwd": scopes nest at '/'
    rec(l, CollectiveKind::broadcast, 4, DType::i64);  // 32 bytes
  }

  const verify::CommTally fwd = verify::tally(l, "fwd");
  CHECK(fwd.count() == 3);
  CHECK(fwd.bytes() == 912);
  CHECK(fwd.of(CollectiveKind::all_reduce) == verify::KindTally{2, 880});
  CHECK(fwd.of(CollectiveKind::all_gather) == verify::KindTally{1, 32});
  CHECK(fwd.of(CollectiveKind::reduce_scatter) == verify::KindTally{0, 0});
  // kinds in their names' order: all_gather before all_reduce
  std::vector<std::string> kinds;
  for (const auto& [k, v] : fwd.by_kind()) kinds.push_back(k);
  CHECK(kinds == std::vector<std::string>{"all_gather", "all_reduce"});

  CHECK(verify::tally(l, "fwd/block0/attn").bytes() == 32);
  CHECK(verify::tally(l, "fwd/block").empty());  // a prefix that is not a scope
  const auto bwd = verify::tally(l, "bwd");
  CHECK(bwd.count() == 1);
  CHECK(bwd.of(CollectiveKind::reduce_scatter) == verify::KindTally{1, 128});
  const auto all = verify::tally(l);
  CHECK(all.count() == 5);
  CHECK(all.bytes() == 800 + 80 + 32 + 128 + 32);

  // the same tally built by hand, and +=, and adding zero collectives adds no kind
  verify::CommTally hand;
  hand.add(CollectiveKind::all_reduce, 440, 2);
  hand.add(CollectiveKind::all_gather, 32);
  hand.add(CollectiveKind::all_to_all, 999, 0);
  CHECK(hand == fwd);
  verify::CommTally sum = fwd;
  sum += bwd;
  CHECK(sum.count() == 4);
  CHECK(sum.bytes() == 1040);
  CHECK(verify::tally_passes(l, "fwd", "bwd") == verify::PassTally{fwd, bwd});
  const auto not_attn = verify::tally_if(l.entries(), [](const LedgerEntry& e) {
    return Ledger::in_scope(e.scope, "fwd") && !Ledger::in_scope(e.scope, "fwd/block0/attn");
  });
  CHECK(not_attn.of(CollectiveKind::all_reduce) == verify::KindTally{2, 880});
  CHECK(not_attn.of(CollectiveKind::all_gather).count == 0);
  CHECK(not_attn.bytes() == 880);
}

TEST_CASE("verify::LayerCheck: ColumnParallelLinear X[R] · W[C] + b → Y[C] against its dense twin") {
  // X [2×3], W [3×4], b [1×4], dY [2×4]: small integers, so every value below is exact.
  const Md X = mat(2, 3, {1, 2, 0, 0, 1, -1});
  const Md W = mat(3, 4, {1, 0, 2, -1, 0, 1, 1, 0, 3, -2, 0, 1});
  const Md b = mat(1, 4, {1, 0, -1, 2});
  const Md dY = mat(2, 4, {1, 0, 0, 1, 0, 1, 1, 0});
  // By hand: Y = X·W + b; row 0 = W₀ + 2·W₁ + b, row 1 = W₁ − W₂ + b.
  const Md Y = mat(2, 4, {2, 2, 3, 1, -2, 3, 0, 1});
  // dX = dY·Wᵀ: row 0 = W[:,0] + W[:,3], row 1 = W[:,1] + W[:,2].
  const Md dX = mat(2, 3, {0, 0, 4, 2, 2, -2});
  // dW = Xᵀ·dY: row k = X[0,k]·dY₀ + X[1,k]·dY₁.
  const Md dW = mat(3, 4, {1, 0, 0, 1, 2, 1, 1, 2, 0, -1, -1, 0});
  const Md db = mat(1, 4, {1, 1, 1, 1});  // column sums of dY

  // The run: p ranks, the layer from the masters `w`; rank 0's checks come back.
  auto run = [&](int p, const Md& w) {
    verify::LayerCheck out;
    run_ranks(p, [&](ThreadComm& c) {
      Group g(c);
      const auto layer = nn::ColumnParallelLinear<double>::from_dense(w, &b, g);
      const auto f = layer.forward(shard<Replicated>(X, g));
      const auto gr = layer.backward(f.cache, shard<ColSharded>(dY, g));
      verify::LayerCheck row("fc", verify::tolerance_for<double>());
      row.add_sharded("y", f.y, Y);  // to_dense: a collective, every rank calls it
      row.add_sharded("dx", gr.dx, dX);
      row.add_sharded("dW", gr.params.dw, dW);
      row.add_sharded("db", *gr.params.db, db);
      if (c.rank() == 0) out = row;
    });
    return out;
  };

  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    const auto ok = run(p, W);
    REQUIRE(ok.checks.size() == 4);
    CHECK(ok.all_pass());
    CHECK(ok.failures() == 0);
    CHECK(ok.max_error() == 0.0);  // integers: exact

    // One weight entry perturbed: W[2,3] = 1 → 1.5. Y[1,3] = −1·1.5 + 2 = 0.5 instead of 1: error
    // 0.5 over max|Y| = 3, i.e. 1/6; dX[0,2] = 3 + 1.5 = 4.5 instead of 4: 0.5 over max|dX| = 4.
    // dW and db do not read W.
    Md Wp = W;
    Wp(2, 3) += 0.5;
    const auto bad = run(p, Wp);
    REQUIRE(bad.checks.size() == 4);
    CHECK_FALSE(bad.all_pass());
    CHECK(bad.failures() == 2);
    CHECK_FALSE(bad.checks[0].pass);
    CHECK(bad.checks[0].err.max_abs == 0.5);
    CHECK(bad.checks[0].err.max_rel == doctest::Approx(1.0 / 6).epsilon(1e-15));
    CHECK(bad.checks[0].err.row == 1);
    CHECK(bad.checks[0].err.col == 3);
    CHECK_FALSE(bad.checks[1].pass);
    CHECK(bad.checks[1].err.max_rel == 0.125);
    CHECK(bad.checks[2].pass);
    CHECK(bad.checks[3].pass);
    CHECK(bad.worst()->name == "y");
    CHECK(bad.max_error() == doctest::Approx(1.0 / 6).epsilon(1e-15));
  }
}

TEST_CASE("verify::LayerCheck: padding past the dense twin must be exactly zero; scalars and flags") {
  const Md E = mat(2, 2, {1, -2, 3, 4});
  Md D = Md::Zero(3, 2);  // one padded row
  D.topRows(2) = E;
  verify::LayerCheck row("embedding", 1e-12);
  row.add("E", D, E);
  REQUIRE(row.checks.size() == 2);
  CHECK(row.checks[1].name == "E padding = 0");
  CHECK(row.all_pass());
  D(2, 1) = 0.25;
  row.add("E", D, E);
  REQUIRE(row.checks.size() == 4);
  CHECK(row.checks[2].pass);  // the overlap still agrees
  CHECK_FALSE(row.checks[3].pass);
  CHECK(row.checks[3].err.max_abs == 0.25);
  CHECK(std::isinf(row.checks[3].err.max_rel));
  CHECK(row.worst() == &row.checks[3]);

  const auto s = verify::check_scalar("loss", 2.5, 2.0, 0.3);  // |0.5| / 2 = 0.25 ≤ 0.3
  CHECK(s.pass);
  CHECK(s.err.max_rel == 0.25);
  CHECK_FALSE(verify::check_scalar("loss", 2.5, 2.0, 0.2).pass);
  CHECK(verify::check_flag("replicas", true).pass);
  CHECK(std::isinf(verify::check_flag("replicas", false).err.max_rel));
  CHECK(verify::tolerance_for<double>() == 1e-12);
  CHECK(verify::tolerance_for<float>() == 1e-5);
}

TEST_CASE("verify::check_scalar: 0 against 0 agrees; NaN or ∞ on either side fails") {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const auto zero = verify::check_scalar("loss", 0.0, 0.0, 1e-12);  // a one-token vocabulary: loss 0, dense 0
  CHECK(zero.pass);
  CHECK(zero.err.max_abs == 0);
  CHECK(zero.err.max_rel == 0);
  CHECK(verify::check_scalar("loss", -0.0, 0.0, 0).pass);
  const auto off = verify::check_scalar("loss", 1e-300, 0.0, 1e-12);  // anything but 0 against 0: ∞
  CHECK_FALSE(off.pass);
  CHECK(off.err.max_abs == 1e-300);
  CHECK(std::isinf(off.err.max_rel));
  for (const auto& ae : {std::pair{nan, 0.0}, std::pair{0.0, nan}, std::pair{nan, nan}, std::pair{inf, inf},
                         std::pair{inf, 1.0}, std::pair{1.0, -inf}}) {
    const double a = ae.first, e = ae.second;  // not a structured binding: Clang 14 cannot CAPTURE one
    const auto c = verify::check_scalar("loss", a, e, 1e-12);
    CAPTURE(a);
    CAPTURE(e);
    CHECK_FALSE(c.pass);
    CHECK(std::isinf(c.err.max_rel));
  }
  CHECK(verify::relative_error(0, 0) == 0);
  CHECK(verify::relative_error(0.5, 2) == 0.25);
  CHECK(std::isinf(verify::relative_error(0.5, 0)));
  CHECK(std::isinf(verify::relative_error(nan, 1)));
  CHECK(std::isinf(verify::relative_error(0, nan)));
  // A NaN error, however it got into a row, is its largest.
  verify::LayerCheck row("head", 1e-12);
  row.add(verify::check_scalar("loss", 1.0, 1.0, 1e-12));
  row.add(verify::Check{"hand-made", {0, nan}, false});
  CHECK(std::isinf(row.max_error()));
}

TEST_CASE("verify::layout_name and nbytes: read from the types") {
  std::string wn, wt, xn;
  std::size_t wb = 0, xb = 0;
  run_ranks(2, [&](ThreadComm& c) {
    Group g(c);
    const auto w = shard<ColSharded>(Md(Md::Zero(3, 4)), g);
    const auto x = shard<Replicated>(Md(Md::Zero(2, 3)), g);
    if (c.rank() != 0) return;
    wn = verify::layout_name("W", w);
    wt = verify::layout_name("W", transpose(w));
    xn = verify::layout_name("X", x);
    wb = verify::nbytes(w);
    xb = verify::sum_bytes(x, std::optional<Sharded<double, ColSharded>>{});
  });
  CHECK(wn == "W[C]");
  CHECK(wt == "Wᵀ[Row]");
  CHECK(xn == "X[R]");
  CHECK(wb == 3 * 2 * sizeof(double));  // 3 rows × 2 of the 4 columns
  CHECK(xb == 2 * 3 * sizeof(double));  // the whole X, and nothing for the empty optional
}

TEST_CASE("verify::gather_strings: every rank's string, any length (empty too), on the root only") {
  for (int p : {1, 3, 4}) {
    for (int root : {0, p - 1}) {
      CAPTURE(p);
      CAPTURE(root);
      std::vector<std::vector<std::string>> got(static_cast<std::size_t>(p));
      run_ranks(p, [&](ThreadComm& c) {
        // rank r: 5·r characters 'a' + r (rank 0's is empty; lengths not multiples of 4)
        const std::string mine(static_cast<std::size_t>(5 * c.rank()), static_cast<char>('a' + c.rank()));
        got[static_cast<std::size_t>(c.rank())] = verify::gather_strings(Group(c), mine, root);
      });
      for (int r = 0; r < p; ++r) {
        if (r != root) {
          CHECK(got[static_cast<std::size_t>(r)].empty());
          continue;
        }
        REQUIRE(got[static_cast<std::size_t>(r)].size() == static_cast<std::size_t>(p));
        for (int q = 0; q < p; ++q)
          CHECK(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)] ==
                std::string(static_cast<std::size_t>(5 * q), static_cast<char>('a' + q)));
      }
    }
  }
}
