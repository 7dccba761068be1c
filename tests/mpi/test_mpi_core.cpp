// The core's laws across processes: MpiComm on MPI_COMM_WORLD and on sub-communicators from
// MPI_Comm_split. Every rank builds the same dense operands from the same seeds, runs the
// sharded operation, gathers and compares; failures on any rank fail the run.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {

// Sum a double over the world with raw MPI (not the communicator under test).
double world_sum(double v) {
  double s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

template <class T, class SA, class SB>
void matmul_pair(Group g, std::uint64_t seed, int& checked) {
  if constexpr (matmul_rule(SA::kind, SB::kind).valid) {
    const int p = g.size();
    const Index m = 2 * p, k = 3 * p, n = p;
    const Mat<T> A = testing::dense_of<SA, T>(m, k, seed, p), B = testing::dense_of<SB, T>(k, n, seed + 1, p);
    const Mat<T> expected = A * B;
    auto a = testing::make_operand<SA, T>(g, m, k, seed);
    auto b = testing::make_operand<SB, T>(g, k, n, seed + 1);
    CAPTURE(SA::notation);
    CAPTURE(SB::notation);
    CHECK(compare(matmul(a, b), expected).max_abs == 0.0);
    // and the transposed form the backward pass uses: (Bᵀ · Aᵀ)ᵀ = A · B
    const Mat<T> expected_t = expected.transpose();
    if constexpr (matmul_rule(transpose(SB::kind), transpose(SA::kind)).valid)
      CHECK(compare(matmul(transpose(b), transpose(a)), expected_t).max_abs == 0.0);
    ++checked;
  }
}

template <class T>
int all_matmul_laws(Group g) {
  int checked = 0;
  testing::for_each_layout_pair([&]<class SA, class SB>() { matmul_pair<T, SA, SB>(g, 40, checked); });
  return checked;
}

}  // namespace

TEST_CASE_TEMPLATE("MPI: matmul laws for every valid layout pair", T, float, double) {
  Group g = MpiComm(MPI_COMM_WORLD);
  CHECK(all_matmul_laws<T>(g) == 8);
}

TEST_CASE_TEMPLATE("MPI: redistributions, their adjoints and the ledger", T, float, double) {
  MpiComm world(MPI_COMM_WORLD);
  Ledger ledger;
  Group g = ledgered(world, ledger);
  const int p = g.size();
  const Index r = 2 * p, c = 3 * p;
  const Mat<T> X = testing::random_int<T>(r, c, 50);
  const Mat<T> Z = testing::partial_dense<T>(r, c, 51, p);
  auto z = testing::make_operand<Partial, T>(g, r, c, 51);

  CHECK(compare(all_reduce(z), Z).max_abs == 0.0);
  CHECK(compare(reduce_scatter<RowSharded>(z), Z).max_abs == 0.0);
  CHECK(compare(reduce_scatter<ColSharded>(z), Z).max_abs == 0.0);
  auto xr = shard<RowSharded>(X, g);
  auto xc = shard<ColSharded>(X, g);
  CHECK(compare(all_gather(xr), X).max_abs == 0.0);
  CHECK(compare(all_gather(xc), X).max_abs == 0.0);
  CHECK(compare(all_to_all<ColSharded>(xr), X).max_abs == 0.0);
  CHECK(compare(all_to_all<RowSharded>(xc), X).max_abs == 0.0);
  CHECK(compare(split<ColSharded>(shard<Replicated>(X, g)), X).max_abs == 0.0);

  // Exactly the seven communicating calls above, each of the dense size r·c.
  REQUIRE(ledger.entries().size() == 7);
  for (const auto& e : ledger.entries()) {
    CHECK(e.elements == static_cast<std::size_t>(r * c));
    CHECK(e.bytes == static_cast<std::size_t>(r * c) * sizeof(T));
    CHECK(e.group_size == p);
  }
  CHECK(ledger.count(CollectiveKind::all_reduce) == 1);
  CHECK(ledger.count(CollectiveKind::reduce_scatter) == 2);
  CHECK(ledger.count(CollectiveKind::all_gather) == 2);
  CHECK(ledger.count(CollectiveKind::all_to_all) == 2);

  // Adjoint pairings, summed over processes with raw MPI.
  auto yrow = shard<RowSharded>(testing::random_int<T>(r, c, 52), g);
  CHECK(world_sum(testing::local_pairing(reduce_scatter<RowSharded>(z), yrow)) ==
        world_sum(testing::local_pairing(z, adjoint::reduce_scatter(yrow))));
  auto ypart = testing::make_operand<Partial, T>(g, r, c, 53);
  CHECK(world_sum(testing::local_pairing(all_gather(xc), ypart)) ==
        world_sum(testing::local_pairing(xc, adjoint::all_gather<ColSharded>(ypart))));
  CHECK(world_sum(testing::local_pairing(copy_to(shard<Replicated>(X, g)), ypart)) ==
        world_sum(testing::local_pairing(shard<Replicated>(X, g), adjoint::copy_to(ypart))));
}

TEST_CASE("MPI: sub-communicators from a split are groups of their own") {
  MpiComm world(MPI_COMM_WORLD);
  if (world.size() < 2 || world.size() % 2 != 0) return;
  // Two halves: ranks {0, 2, …} and {1, 3, …}.
  MpiComm half = world.split(world.rank() % 2, world.rank());
  Group g = half;
  CHECK(g.size() == world.size() / 2);
  CHECK(all_matmul_laws<double>(g) == 8);
  // A tensor of the world and one of the half are different groups.
  auto a = shard<Replicated>(Mat<double>::Zero(2, 2), Group(world));
  auto b = shard<Replicated>(Mat<double>::Zero(2, 2), g);
  CHECK_THROWS_AS(matmul(a, b), GroupMismatchError);
  // Two wrappers of one MPI communicator are the same group.
  auto c = shard<Replicated>(Mat<double>::Zero(2, 2), Group(MpiComm(MPI_COMM_WORLD)));
  CHECK_NOTHROW((void)matmul(a, c));
}

TEST_CASE("MPI: a tensor not divisible by the process count takes the balanced blocks") {
  Group g = MpiComm(MPI_COMM_WORLD);
  const int p = g.size();
  const Index rows = 2 * p + 1;  // rank 0 holds 3 rows, the others 2
  Mat<double> a(rows, 2);
  for (Index i = 0; i < a.size(); ++i) a.data()[i] = static_cast<double>(i);
  const auto x = shard<RowSharded>(a, g);
  CHECK(x.local_rows() == (g.rank() == 0 ? 3 : 2));
  CHECK(x.row_offset() == (g.rank() == 0 ? 0 : 2 * g.rank() + 1));
  CHECK(to_dense(x) == a);
}
