// What a new user hit (issue 12), across processes: shard<Replicated> of data generated inside
// each rank is a ReplicaMismatchError on every rank (the replica check is on in every test, see
// tests/support/doctest_mpi_main.cpp), and distribute<L>(A, g, src) builds a tensor from one
// rank's data: the shape, then one broadcast, then every rank's share.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <shardalg/mpi.hpp>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {
Mat<double> per_rank_random(Index r, Index c, int rank) { return testing::random_real<double>(r, c, 100 + rank); }

std::string differs(int rank, const char* shape) {
  return std::string("shard<Replicated>: rank ") + std::to_string(rank) + "'s " + shape +
         " matrix differs from rank 0's; a Replicated tensor must hold the same value on every rank: build it "
         "from the same data on every rank, or broadcast one rank's with distribute<Replicated>(A, group, "
         "src_rank)";
}

template <class L>
void check_distribute(Group plain, int src) {
  CAPTURE(src);
  CAPTURE(L::name);
  const int p = plain.size();
  const Index n = 4 * p;
  const Mat<double> A = testing::random_int<double>(n, n, 40 + static_cast<std::uint64_t>(src));
  Ledger l;
  Group g = ledgered(plain, l);
  const Mat<double> mine = plain.rank() == src ? A : Mat<double>();  // only the source has the data
  const auto x = distribute<L>(mine, g, src);
  CHECK(x.rows() == n);
  CHECK(x.cols() == n);
  CHECK(to_dense(x) == A);
  if constexpr (std::is_same_v<L, Partial>) {
    CHECK(x.local() == (plain.rank() == src ? A : Mat<double>(Mat<double>::Zero(n, n))));
    CHECK(l.count() == 0);
  } else {
    CHECK(x.local() == shard<L>(A, plain).local());
    CHECK(l.count() == 1);
    CHECK(l.count(CollectiveKind::broadcast) == 1);
    CHECK(l.entries().at(0).elements == static_cast<std::size_t>(n * n));
    CHECK(l.entries().at(0).layout_out == L::notation);
  }
}
}  // namespace

TEST_CASE("MPI misuse: shard<Replicated> of data generated inside each rank is a ReplicaMismatchError on every rank") {
  REQUIRE(check_replicas());  // the test main turns it on
  Group g = MpiComm(MPI_COMM_WORLD);
  const int p = g.size();
  const std::string first = differs(1, "4x8"), last = differs(p - 1, "3x5");
  CHECK_THROWS_WITH_AS((void)shard<Replicated>(per_rank_random(4, 8, g.rank()), g), first.c_str(),
                       ReplicaMismatchError);
  // Only the last rank differs, in one bit.
  Mat<double> A = testing::random_int<double>(3, 5, 7);
  if (g.rank() == p - 1) A(2, 4) = std::nextafter(A(2, 4), 100.0);
  CHECK_THROWS_WITH_AS((void)shard<Replicated>(A, g), last.c_str(), ReplicaMismatchError);
  // Different shapes.
  CHECK_THROWS_WITH_AS((void)shard<Replicated>(Mat<double>::Zero(4, g.rank() == 1 ? 6 : 8), g),
                       "shard<Replicated>: rank 1 passed a 4x6 matrix and rank 0 a 4x8 one; a Replicated tensor "
                       "must hold the same value on every rank: build it from the same data on every rank, or "
                       "broadcast one rank's with distribute<Replicated>(A, group, src_rank)",
                       ReplicaMismatchError);
  // The same data on every rank: accepted, and the check is not ledgered.
  Ledger l;
  const Mat<double> B = testing::random_int<double>(4, 8, 3);
  CHECK(shard<Replicated>(B, ledgered(g, l)).local() == B);
  CHECK(l.count() == 0);
  // With the check off the mistake goes through (and replicas_agree finds it afterwards).
  {
    ReplicaCheck off(false);
    const auto x = shard<Replicated>(per_rank_random(4, 8, g.rank()), g);
    CHECK_FALSE(replicas_agree(x));
  }
  CHECK(check_replicas());
}

TEST_CASE("MPI misuse: distribute<L>(A, group, src_rank) from every source rank, on the world and a sub-communicator") {
  MpiComm world(MPI_COMM_WORLD);
  for (int src = 0; src < world.size(); ++src) {
    check_distribute<Replicated>(world, src);
    check_distribute<RowSharded>(world, src);
    check_distribute<ColSharded>(world, src);
    check_distribute<Partial>(world, src);
  }
  // Halves of the world (by rank parity): the same from every source rank of each half.
  Group half = world.split(world.rank() % 2, world.rank());
  for (int src = 0; src < half.size(); ++src) {
    check_distribute<RowSharded>(half, src);
    check_distribute<Replicated>(half, src);
  }
  // The fix for data generated inside each rank: distribute it from one rank.
  Group g = world;
  const int src = g.size() - 1;
  const auto x = distribute<Replicated>(per_rank_random(4, 8, g.rank()), g, src);
  CHECK(x.local() == per_rank_random(4, 8, src));
  CHECK(replicas_agree(x));
  CHECK_NOTHROW((void)shard<Replicated>(x.local(), g));
}

TEST_CASE("MPI misuse: distribute<L> with a bad source rank, or ranks that name different ones") {
  Group g = MpiComm(MPI_COMM_WORLD);
  const int p = g.size();
  const Mat<double> A = Mat<double>::Ones(4, 4);
  const std::string outside = "distribute<Replicated>: source rank " + std::to_string(p) + " is outside a group of " +
                              std::to_string(p) + " ranks";
  CHECK_THROWS_WITH_AS((void)distribute<Replicated>(A, g, p), outside.c_str(), RankError);
  const std::string negative =
      "distribute<ColSharded>: source rank -1 is outside a group of " + std::to_string(p) + " ranks";
  CHECK_THROWS_WITH_AS((void)distribute<ColSharded>(A, g, -1), negative.c_str(), RankError);
  const std::string different =
      "distribute<RowSharded>: the ranks name different source ranks (0 and " + std::to_string(p - 1) + ")";
  CHECK_THROWS_WITH_AS((void)distribute<RowSharded>(A, g, g.rank()), different.c_str(), RankError);
  // The source's shape does not divide: every rank learns it from the shape broadcast and takes
  // its balanced block (rank 0 one row more than the others).
  const Mat<double> odd = g.rank() == 0 ? Mat<double>(Mat<double>::Ones(4 * p + 1, 4)) : Mat<double>();
  const auto xo = distribute<RowSharded>(odd, g, 0);
  CHECK(xo.local_rows() == (g.rank() == 0 ? 5 : 4));
  CHECK(to_dense(xo) == Mat<double>::Ones(4 * p + 1, 4));
  // The world is still usable afterwards: nothing was left half-done.
  CHECK(to_dense(distribute<ColSharded>(A, g, 0)) == A);
}
