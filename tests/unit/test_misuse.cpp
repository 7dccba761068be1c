// What a new user hit (issue 12): each case here failed before its fix.
//
//   1. a ledgered operand is counted whichever side of a binary operation it is on
//   2. an empty (default-constructed) Sharded is a typed error naming the operation, not a crash
//   3. cast<U>(x): the element-type conversion E140 names
//   4. any arithmetic scalar scales a tensor; sum(x) → [1, 1][R]
//   5. a group mismatch names the groups, not only their sizes
#include <doctest/doctest.h>

#include <functional>
#include <type_traits>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {

/// The number of collectives `body(gx, gy)` records when only gx, only gy, or both carry the
/// rank's ledger: {plain·ledgered, ledgered·plain, ledgered·ledgered}.
struct OrderCounts {
  std::size_t first_plain, second_plain, both;
};
OrderCounts order_counts(ThreadComm& c, const std::function<void(Group, Group)>& body) {
  Group plain = c;
  OrderCounts out{};
  {
    Ledger l;
    body(plain, ledgered(c, l));
    out.first_plain = l.count();
  }
  {
    Ledger l;
    body(ledgered(c, l), plain);
    out.second_plain = l.count();
  }
  {
    Ledger l;
    Group g = ledgered(c, l);
    body(g, g);
    out.both = l.count();
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. The ledger sees a collective whichever operand carried the ledgered handle
// ---------------------------------------------------------------------------------------------

TEST_CASE("misuse: a ledgered operand is counted in either operand order") {
  for (int p : {2, 4}) {
    CAPTURE(p);
    run_ranks(p, [](ThreadComm& c) {
      const Mat<double> X = testing::random_int<double>(4, 8, 1), W = testing::random_int<double>(8, 4, 2);
      const Mat<double> B = testing::random_int<double>(1, 8, 3);

      // H[C]·W[Row] → Z[Partial]; all_reduce → Z[R]: one all_reduce.
      auto mm = order_counts(c, [&](Group gx, Group gw) {
        (void)all_reduce(matmul(shard<ColSharded>(X, gx), shard<RowSharded>(W, gw)));
      });
      CHECK(mm.first_plain == 1);
      CHECK(mm.second_plain == 1);
      CHECK(mm.both == 1);

      // The planned product: the all_reduce after the local product.
      auto planned = order_counts(c, [&](Group gx, Group gw) {
        (void)matmul<Replicated>(shard<ColSharded>(X, gx), shard<RowSharded>(W, gw));
      });
      CHECK(planned.first_plain == 1);
      CHECK(planned.second_plain == 1);
      CHECK(planned.both == 1);

      // X[Row]·W[C] is not a local product: the plan gathers an operand first (a pre-step on one
      // operand, whichever handle carries the ledger) and finishes with a collective on the result.
      auto pre = order_counts(c, [&](Group gx, Group gw) {
        (void)matmul<Replicated>(shard<RowSharded>(X, gx), shard<ColSharded>(W, gw));
      });
      CHECK(pre.both >= 2);
      CHECK(pre.first_plain == pre.both);
      CHECK(pre.second_plain == pre.both);

      // Z₁[Partial] + Z₂[Partial] → [Partial]; all_reduce: one all_reduce.
      auto add = order_counts(c, [&](Group ga, Group gb) {
        (void)all_reduce(Sharded<double, Partial>(X, 4, 8, ga) + Sharded<double, Partial>(X, 4, 8, gb));
      });
      CHECK(add.first_plain == 1);
      CHECK(add.second_plain == 1);
      CHECK(add.both == 1);

      // Z₁[Partial] − Z₂[Partial] and Z[Partial] ⊙ M[R]: one all_reduce each.
      auto sub = order_counts(c, [&](Group ga, Group gb) {
        (void)all_reduce(Sharded<double, Partial>(X, 4, 8, ga) - Sharded<double, Partial>(X, 4, 8, gb));
      });
      CHECK(sub.first_plain == 1);
      CHECK(sub.second_plain == 1);
      auto had = order_counts(c, [&](Group ga, Group gb) {
        (void)all_reduce(hadamard(Sharded<double, Partial>(X, 4, 8, ga), shard<Replicated>(X, gb)));
      });
      CHECK(had.first_plain == 1);
      CHECK(had.second_plain == 1);

      // X[C] + b[C]; all_gather → [R]: one all_gather.
      auto bias = order_counts(c, [&](Group gx, Group gb) {
        (void)all_gather(add_bias(shard<ColSharded>(X, gx), shard<ColSharded>(B, gb)));
      });
      CHECK(bias.first_plain == 1);
      CHECK(bias.second_plain == 1);
      CHECK(bias.both == 1);
    });
  }
}

TEST_CASE("misuse: the result of a mixed operation carries the ledgered handle") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l;
    Group plain = c, led = ledgered(c, l);
    const Mat<double> X = testing::random_int<double>(4, 4, 1);
    const auto a = shard<ColSharded>(X, plain);
    const auto b = shard<ColSharded>(X, led);
    CHECK((a + b).group().ledger() == &l);
    CHECK((b + a).group().ledger() == &l);
    CHECK((a - b).group().ledger() == &l);
    CHECK(hadamard(a, b).group().ledger() == &l);
    CHECK(matmul(shard<Replicated>(X, plain), b).group().ledger() == &l);
    CHECK((a + a).group().ledger() == nullptr);
  });
}

TEST_CASE("misuse: operands on two different ledgers") {
  run_ranks(2, [](ThreadComm& c) {
    Ledger l1, l2;
    const Mat<double> X = testing::random_int<double>(4, 4, 1);
    const auto a = shard<RowSharded>(X, ledgered(c, l1));
    const auto b = shard<RowSharded>(X, ledgered(c, l2));
    const auto r = shard<Replicated>(X, ledgered(c, l2));
    CHECK_THROWS_WITH_AS(a + b,
                         "add: the operands' handles carry different ledgers; rebind one operand to the "
                         "other's group",
                         GroupMismatchError);
    CHECK_THROWS_WITH_AS(matmul(a, r),
                         "matmul: the operands' handles carry different ledgers; rebind one operand to the "
                         "other's group",
                         GroupMismatchError);
    CHECK_THROWS_WITH_AS(matmul<Replicated>(a, r),
                         "matmul: the operands' handles carry different ledgers; rebind one operand to the "
                         "other's group",
                         GroupMismatchError);
    CHECK(l1.count() == 0);
    CHECK(l2.count() == 0);
    CHECK_NOTHROW((void)(a + b.rebind(a.group())));
  });
}

// ---------------------------------------------------------------------------------------------
// 5. A group mismatch names the groups
// ---------------------------------------------------------------------------------------------

namespace {
/// A communicator with no name(): the one-rank group under another key.
struct Anonymous {
  SelfComm self;
  int rank() const { return 0; }
  int size() const { return 1; }
  std::uintptr_t key() const { return 2; }
  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op) { self.all_reduce(b, n, t, op); }
  void all_gather(const void* s, void* r, std::size_t n, DType t) { self.all_gather(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) {
    self.reduce_scatter(s, r, n, t, op);
  }
  void all_to_all(const void* s, void* r, std::size_t n, DType t) { self.all_to_all(s, r, n, t); }
  void broadcast(void* b, std::size_t n, DType t, int root) { self.broadcast(b, n, t, root); }
  void send(const void* b, std::size_t n, DType t, int peer) { self.send(b, n, t, peer); }
  void recv(void* b, std::size_t n, DType t, int peer) { self.recv(b, n, t, peer); }
  void barrier() {}
};
}  // namespace

TEST_CASE("misuse: a group mismatch names the communicators") {
  Group self = SelfComm{};
  Group anon = Anonymous{};
  const Mat<double> X = Mat<double>::Zero(2, 2);
  run_ranks(2, [&](ThreadComm& c) {
    auto a = shard<Replicated>(X, Group(c));
    auto b = shard<Replicated>(X, self);
    CHECK_THROWS_WITH_AS(hadamard(a, b),
                         "hadamard: operands belong to different communicator groups (ThreadComm of 2 ranks and "
                         "SelfComm of 1 rank)",
                         GroupMismatchError);
  });
  // Two thread worlds of one size: the message says the second is another one.
  run_ranks(1, [&](ThreadComm& c1) {
    run_ranks(1, [&](ThreadComm& c2) {
      auto a = shard<Replicated>(X, Group(c1));
      auto b = shard<Replicated>(X, Group(c2));
      CHECK_THROWS_WITH_AS(a - b,
                           "sub: operands belong to different communicator groups (ThreadComm of 1 rank and "
                           "another ThreadComm of 1 rank)",
                           GroupMismatchError);
    });
  });
  // A communicator without name(); a ledgered handle is named by what it decorates.
  Ledger l;
  auto a = shard<Replicated>(X, anon);
  auto b = shard<Replicated>(X, ledgered(SelfComm{}, l));
  CHECK_THROWS_WITH_AS(matmul(a, b),
                       "matmul: operands belong to different communicator groups (a communicator of 1 rank and "
                       "SelfComm of 1 rank)",
                       GroupMismatchError);
  CHECK_THROWS_WITH_AS(add_bias(a, shard<Replicated>(Mat<double>::Zero(1, 2), self)),
                       "add_bias: operands belong to different communicator groups (a communicator of 1 rank and "
                       "SelfComm of 1 rank)",
                       GroupMismatchError);
}

// ---------------------------------------------------------------------------------------------
// 2. An empty Sharded is a typed error naming the operation
// ---------------------------------------------------------------------------------------------

TEST_CASE("misuse: operations on a default-constructed Sharded") {
  const Sharded<double, ColSharded> e;  // no group
  const Sharded<double, Partial> ep;
  const Sharded<double, Replicated> er;
  Group self = SelfComm{};
  const auto x = shard<ColSharded>(Mat<double>::Ones(2, 2), self);
  const auto r = shard<Replicated>(Mat<double>::Ones(2, 2), self);
  const auto bias = shard<ColSharded>(Mat<double>::Ones(1, 2), self);

  CHECK_THROWS_WITH_AS(e + e, "add: operand is an empty Sharded (default-constructed, no group)", EmptyTensorError);
  CHECK_THROWS_WITH_AS(x - e, "sub: operand is an empty Sharded (default-constructed, no group)", EmptyTensorError);
  CHECK_THROWS_WITH_AS(hadamard(e, x), "hadamard: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(add_bias(e, bias), "add_bias: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(matmul(r, e), "matmul: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(matmul(transpose(e), r), "matmul: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(matmul<Replicated>(e, r), "matmul: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(matmul_plan<Replicated>(r, e),
                       "matmul_plan: operand is an empty Sharded (default-constructed, no group)", EmptyTensorError);
  CHECK_THROWS_WITH_AS(2.0 * e, "scale: operand is an empty Sharded (default-constructed, no group)", EmptyTensorError);

  // Collectives and the dense bridge.
  CHECK_THROWS_WITH_AS(all_reduce(ep), "all_reduce: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(all_gather(e), "all_gather: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(reduce_scatter<RowSharded>(ep),
                       "reduce_scatter<RowSharded>: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(split<RowSharded>(er),
                       "split<RowSharded>: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(all_to_all<RowSharded>(e),
                       "all_to_all<RowSharded>: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(redistribute<Replicated>(e),
                       "redistribute<Replicated>: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(to_dense(e), "to_dense: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(to_dense(er), "to_dense: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS(sum(e), "sum: operand is an empty Sharded (default-constructed, no group)", EmptyTensorError);
  CHECK_THROWS_WITH_AS(cast<float>(e), "cast: operand is an empty Sharded (default-constructed, no group)",
                       EmptyTensorError);

  // Everything else that reaches the empty handle says so, as the same type.
  CHECK_THROWS_WITH_AS((void)e.size(),
                       "Group::size: the handle is empty (a default-constructed Group or Sharded: no communicator)",
                       EmptyTensorError);
  Group none;
  double v = 1;
  CHECK_THROWS_WITH_AS(none.all_reduce(&v, 1),
                       "Group::all_reduce: the handle is empty (a default-constructed Group or Sharded: no "
                       "communicator)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS((Sharded<double, RowSharded>(Mat<double>::Zero(2, 2), 2, 2, none)),
                       "Sharded<RowSharded>: constructed on an empty Group (default-constructed, no communicator)",
                       EmptyTensorError);
  CHECK_THROWS_WITH_AS((void)x.rebind(none), "rebind: the new Group is empty (default-constructed, no communicator)",
                       EmptyTensorError);
  // An EmptyTensorError is a shardalg::Error.
  CHECK_THROWS_AS(e + e, Error);
}

// ---------------------------------------------------------------------------------------------
// 3. cast<U>(x)
// ---------------------------------------------------------------------------------------------

TEST_CASE("misuse: cast<U>(x) converts the element type, keeping layout, shape and group") {
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    run_ranks(p, [](ThreadComm& c) {
      Ledger l;
      Group g = ledgered(c, l);
      const Mat<double> A = testing::random_int<double>(4, 8, 5);
      const auto x = shard<ColSharded>(A, g);
      const auto xf = cast<float>(x);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(xf)>, Sharded<float, ColSharded>>);
      CHECK(xf.rows() == 4);
      CHECK(xf.cols() == 8);
      CHECK(xf.group().ledger() == &l);
      CHECK(xf.local() == x.local().cast<float>());
      CHECK(to_dense(xf) == A.cast<float>());

      // 0.25 steps are exact in float: the round trip is the identity.
      const Mat<double> Q = 0.25 * A;
      CHECK(to_dense(cast<double>(cast<float>(shard<RowSharded>(Q, g)))) == Q);
      // double → float rounds: 1 + 2⁻³⁰ is 1 in float.
      const auto tiny = cast<float>(shard<Replicated>(Mat<double>::Constant(1, 1, 1.0 + 0x1p-30), g));
      CHECK(tiny.local()(0, 0) == 1.0f);

      // A Partial: each rank converts its summand; the sum is the converted sum.
      const Mat<float> S = testing::summand<float>(4, 8, 7, c.rank());
      const Sharded<float, Partial> zf(S, 4, 8, g);
      const auto zd = cast<double>(zf);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(zd)>, Sharded<double, Partial>>);
      CHECK(zd.local() == S.cast<double>());
      CHECK(l.count() == 0);  // no communication so far (to_dense is verification traffic)
      CHECK(all_reduce(zd).local() == testing::partial_dense<float>(4, 8, 7, c.size()).cast<double>());
      CHECK(l.count(CollectiveKind::all_reduce) == 1);

      // The fix [shardalg.E140] names: a float operand cast to double meets a double one.
      const auto w = shard<ColSharded>(testing::random_int<float>(8, 4, 9), g);
      const auto y = matmul(shard<Replicated>(A, g), cast<double>(w));
      CHECK(to_dense(y) == A * testing::random_int<float>(8, 4, 9).cast<double>());
    });
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Scalars of any arithmetic type; sum(x)
// ---------------------------------------------------------------------------------------------

TEST_CASE("misuse: an arithmetic scalar of another type scales a tensor, in both orders") {
  run_ranks(2, [](ThreadComm& c) {
    Group g = c;
    const Mat<double> A = testing::random_int<double>(4, 4, 11);
    const auto x = shard<RowSharded>(A, g);
    const auto xf = shard<ColSharded>(A.cast<float>().eval(), g);

    const auto twice = 2 * x;  // an int literal on a double tensor
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(twice)>, Sharded<double, RowSharded>>);
    CHECK(to_dense(twice) == 2.0 * A);
    CHECK(to_dense(x * 3) == 3.0 * A);
    CHECK(to_dense(x * 2.0) == 2.0 * A);

    const auto half = 0.5 * xf;  // a double literal on a float tensor
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(half)>, Sharded<float, ColSharded>>);
    CHECK(to_dense(half) == (0.5f * A.cast<float>()).eval());
    CHECK(to_dense(xf * 0.5) == (0.5f * A.cast<float>()).eval());
    CHECK(to_dense(std::int64_t{-3} * xf) == (-3.0f * A.cast<float>()).eval());

    // Partial too: Σ_r α·Z_r = α·Σ_r Z_r.
    const Sharded<double, Partial> z(testing::summand<double>(4, 4, 3, c.rank()), 4, 4, g);
    CHECK(all_reduce(2 * z).local() == 2.0 * testing::partial_dense<double>(4, 4, 3, c.size()));
    CHECK(all_reduce(z * 0.5f).local() == 0.5 * testing::partial_dense<double>(4, 4, 3, c.size()));

    // An integer tensor: the scalar converts to the element type first (static_cast).
    const auto xi = shard<Replicated>(A.cast<std::int32_t>().eval(), g);
    CHECK(to_dense(3.0 * xi) == (3 * A.cast<std::int32_t>()).eval());
    CHECK(to_dense(xi * 0.5) == Mat<std::int32_t>::Zero(4, 4));
  });
}

namespace {
template <class L>
void check_sum(int p, std::size_t collectives) {
  CAPTURE(p);
  CAPTURE(L::name);
  run_ranks(p, [&](ThreadComm& c) {
    Ledger l;
    Group g = ledgered(c, l);
    const auto x = testing::make_operand<L, double>(g, 12, 12, 21);
    const double expected = testing::dense_of<L, double>(12, 12, 21, c.size()).sum();
    const auto s = sum(x);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(s)>, Sharded<double, Replicated>>);
    CHECK(s.rows() == 1);
    CHECK(s.cols() == 1);
    CHECK(s.local()(0, 0) == expected);  // integer-valued: exact
    CHECK(l.count() == collectives);
    CHECK(l.count(CollectiveKind::all_reduce) == collectives);
    for (const auto& e : l.entries()) {
      CHECK(e.elements == 1);
      CHECK(e.layout_in == "Partial");
      CHECK(e.layout_out == "R");
    }
  });
}
}  // namespace

TEST_CASE("misuse: sum(x) is the sum of the dense value, with the collective its layout requires") {
  for (int p : {1, 2, 3, 4}) {
    check_sum<Replicated>(p, 0);
    check_sum<RowSharded>(p, 1);
    check_sum<ColSharded>(p, 1);
    check_sum<Partial>(p, 1);
  }
  // Not a constant: the value depends on the data (and an int tensor sums in int).
  run_ranks(2, [](ThreadComm& c) {
    const Mat<std::int32_t> A = testing::random_int<std::int32_t>(4, 6, 2);
    const auto s = sum(shard<ColSharded>(A, Group(c)));
    CHECK(s.local()(0, 0) == A.sum());
    CHECK(sum(shard<ColSharded>((A.array() + 1).matrix().eval(), Group(c))).local()(0, 0) == A.sum() + 24);
  });
}
