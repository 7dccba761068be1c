// What a new user hit (issue 12): each case here failed before its fix.
//
//   1. a ledgered operand is counted whichever side of a binary operation it is on
//   2. an empty (default-constructed) Sharded is a typed error naming the operation, not a crash
//   3. cast<U>(x): the element-type conversion E140 names
//   4. any arithmetic scalar scales a tensor; sum(x) → [1, 1][R]
//   5. a group mismatch names the groups, not only their sizes
//   6. shard<Replicated> of different data on different ranks is a ReplicaMismatchError (with the
//      replica check on, as in every test); distribute<L>(A, g, src) broadcasts one rank's A
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

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
    CHECK((a + b).group().recorder() == &l);
    CHECK((b + a).group().recorder() == &l);
    CHECK((a - b).group().recorder() == &l);
    CHECK(hadamard(a, b).group().recorder() == &l);
    CHECK(matmul(shard<Replicated>(X, plain), b).group().recorder() == &l);
    CHECK((a + a).group().recorder() == nullptr);
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
      CHECK(xf.group().recorder() == &l);
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

// ---------------------------------------------------------------------------------------------
// 6. Replicated means the same on every rank: the replica check, and distribute<L>
// ---------------------------------------------------------------------------------------------

namespace {
/// Data generated inside each rank, as a new user writes it: a different matrix on every rank.
Mat<double> per_rank_random(Index r, Index c, int rank) { return testing::random_real<double>(r, c, 100 + rank); }

std::string differs(int rank, const char* shape) {
  return std::string("shard<Replicated>: rank ") + std::to_string(rank) + "'s " + shape +
         " matrix differs from rank 0's; a Replicated tensor must hold the same value on every rank: build it "
         "from the same data on every rank, or broadcast one rank's with distribute<Replicated>(A, group, "
         "src_rank)";
}
}  // namespace

TEST_CASE("misuse: shard<Replicated> of different data on different ranks is a ReplicaMismatchError") {
  ReplicaCheck on(true);
  CHECK(check_replicas());
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    // Random data generated inside each rank: accepted before (and wrong later); now the ranks
    // compare their copies and every rank throws, naming the shape and the first differing rank.
    auto random_inside = [p] {
      run_ranks(p, [](ThreadComm& c) { (void)shard<Replicated>(per_rank_random(4, 8, c.rank()), Group(c)); });
    };
    const std::string first = differs(1, "4x8"), last = differs(p - 1, "3x5");
    if (p == 1) CHECK_NOTHROW(random_inside());
    else CHECK_THROWS_WITH_AS(random_inside(), first.c_str(), ReplicaMismatchError);

    // Only the last rank differs, in one bit of its last element: the message names that rank.
    auto last_differs = [p] {
      run_ranks(p, [p](ThreadComm& c) {
        Mat<double> A = testing::random_int<double>(3, 5, 7);
        if (c.rank() == p - 1 && p > 1) A(2, 4) = std::nextafter(A(2, 4), 100.0);
        (void)shard<Replicated>(A, Group(c));
      });
    };
    if (p == 1) CHECK_NOTHROW(last_differs());
    else CHECK_THROWS_WITH_AS(last_differs(), last.c_str(), ReplicaMismatchError);

    // The same data everywhere: accepted, and the check is verification traffic (not ledgered).
    run_ranks(p, [](ThreadComm& c) {
      Ledger l;
      const Mat<double> A = testing::random_int<double>(4, 8, 3);
      const auto x = shard<Replicated>(A, ledgered(c, l));
      CHECK(x.local() == A);
      CHECK(l.count() == 0);
      // An int tensor and a float one are checked too (the bytes, whatever the type).
      CHECK_NOTHROW((void)shard<Replicated>(A.cast<std::int32_t>().eval(), Group(c)));
      CHECK_NOTHROW((void)shard<Replicated>(A.cast<float>().eval(), Group(c)));
    });
  }

  // Different shapes: the message names both.
  CHECK_THROWS_WITH_AS(run_ranks(3,
                                 [](ThreadComm& c) {
                                   (void)shard<Replicated>(Mat<double>::Zero(4, c.rank() == 2 ? 6 : 8), Group(c));
                                 }),
                       "shard<Replicated>: rank 2 passed a 4x6 matrix and rank 0 a 4x8 one; a Replicated tensor must "
                       "hold the same value on every rank: build it from the same data on every rank, or broadcast "
                       "one rank's with distribute<Replicated>(A, group, src_rank)",
                       ReplicaMismatchError);
  // A float tensor that differs: named the same way; a ReplicaMismatchError is a shardalg::Error.
  CHECK_THROWS_AS(run_ranks(2,
                            [](ThreadComm& c) {
                              (void)shard<Replicated>(per_rank_random(2, 2, c.rank()).cast<float>().eval(), Group(c));
                            }),
                  Error);

  // With the check off, the mistake goes through as before (the ranks hold different "replicas").
  {
    ReplicaCheck off(false);
    CHECK_FALSE(check_replicas());
    std::vector<char> agree(2);
    run_ranks(2, [&](ThreadComm& c) {
      const auto x = shard<Replicated>(per_rank_random(4, 8, c.rank()), Group(c));
      agree[static_cast<std::size_t>(c.rank())] = replicas_agree(x);
    });
    CHECK_FALSE(agree[0]);
  }
  CHECK(check_replicas());  // the guard restored the setting
  set_check_replicas(false);
  CHECK_FALSE(check_replicas());
  set_check_replicas(true);
  CHECK(check_replicas());
}

namespace {
template <class L>
void check_distribute(int p, int src) {
  CAPTURE(p);
  CAPTURE(src);
  CAPTURE(L::name);
  const Mat<double> A = testing::random_int<double>(12, 12, 40 + static_cast<std::uint64_t>(src));
  run_ranks(p, [&](ThreadComm& c) {
    Ledger l;
    Group g = ledgered(c, l);
    // Only rank src has the data; the others pass an empty matrix.
    const Mat<double> mine = c.rank() == src ? A : Mat<double>();
    const auto x = distribute<L>(mine, g, src);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(x)>, Sharded<double, L>>);
    CHECK(x.rows() == 12);
    CHECK(x.cols() == 12);
    CHECK(to_dense(x) == A);
    if constexpr (std::is_same_v<L, Partial>) {
      // No data moves: rank src holds A, the others zeros.
      CHECK(x.local() == (c.rank() == src ? A : Mat<double>(Mat<double>::Zero(12, 12))));
      CHECK(l.count() == 0);
    } else {
      // This rank's share, as shard<L> of A would give it; one broadcast of the whole matrix.
      CHECK(x.local() == shard<L>(A, Group(c)).local());
      CHECK(l.count() == 1);
      CHECK(l.count(CollectiveKind::broadcast) == 1);
      const auto& e = l.entries().at(0);
      CHECK(e.elements == 144);
      CHECK(e.bytes == 144 * sizeof(double));
      CHECK(e.layout_in == "dense");
      CHECK(e.layout_out == L::notation);
    }
  });
}
}  // namespace

TEST_CASE("misuse: distribute<L>(A, group, src_rank) broadcasts rank src's A and takes this rank's share") {
  ReplicaCheck on(true);
  for (int p : {1, 2, 3, 4})
    for (int src = 0; src < p; ++src) {
      check_distribute<Replicated>(p, src);
      check_distribute<RowSharded>(p, src);
      check_distribute<ColSharded>(p, src);
      check_distribute<Partial>(p, src);
    }
  // The fix for data generated inside each rank: distribute it from one rank, and the replicas
  // agree (shard<Replicated> of the result's local block passes the check).
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    run_ranks(p, [](ThreadComm& c) {
      const auto x = distribute<Replicated>(per_rank_random(4, 8, c.rank()), Group(c), 1);
      CHECK(x.local() == per_rank_random(4, 8, 1));
      CHECK(replicas_agree(x));
      CHECK_NOTHROW((void)shard<Replicated>(x.local(), Group(c)));
    });
  }
  // An expression is evaluated once, on the source rank only.
  run_ranks(2, [](ThreadComm& c) {
    const Mat<double> A = testing::random_int<double>(4, 4, 5);
    const auto x = distribute<ColSharded>(2.0 * A, Group(c));
    CHECK(to_dense(x) == 2.0 * A);
  });
}

TEST_CASE("misuse: distribute<L> with a bad source rank, or ranks that name different ones") {
  ReplicaCheck on(true);
  const Mat<double> A = Mat<double>::Ones(4, 4);
  CHECK_THROWS_WITH_AS(run_ranks(2, [&](ThreadComm& c) { (void)distribute<Replicated>(A, Group(c), 2); }),
                       "distribute<Replicated>: source rank 2 is outside a group of 2 ranks", RankError);
  CHECK_THROWS_WITH_AS(run_ranks(4, [&](ThreadComm& c) { (void)distribute<RowSharded>(A, Group(c), -1); }),
                       "distribute<RowSharded>: source rank -1 is outside a group of 4 ranks", RankError);
  CHECK_THROWS_WITH_AS((void)distribute<ColSharded>(A, Group(SelfComm{}), 1),
                       "distribute<ColSharded>: source rank 1 is outside a group of 1 rank", RankError);
  // Every rank names itself: with the replica check on, a RankError on every rank, not a hang.
  CHECK_THROWS_WITH_AS(run_ranks(3, [&](ThreadComm& c) { (void)distribute<Partial>(A, Group(c), c.rank()); }),
                       "distribute<Partial>: the ranks name different source ranks (0 and 2)", RankError);
  // The source's shape does not divide: every rank learns it from the shape broadcast and takes
  // its balanced block (2 rows and 1).
  run_ranks(2, [&](ThreadComm& c) {
    const auto x = distribute<RowSharded>(c.rank() == 1 ? Mat<double>(Mat<double>::Ones(3, 4)) : Mat<double>(), Group(c), 1);
    CHECK(x.local_rows() == (c.rank() == 0 ? 2 : 1));
    CHECK(x.local() == Mat<double>::Ones(x.local_rows(), 4));
  });
  // A RankError is a shardalg::Error.
  CHECK_THROWS_AS((void)distribute<Replicated>(A, Group(SelfComm{}), 3), Error);
}
