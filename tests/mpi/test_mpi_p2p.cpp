// The communicator extensions of issues 16 and 17 on MpiComm (np 2 and 4): MPI_Alltoallv with
// random counts, zeros included, in four dtypes; checked mode's count comparison (the same text
// on every rank, before any data moves); MPI_Isend / MPI_Irecv with the receives posted first;
// the ledger's all_to_all entry (Σ send_counts) and the peer of each point-to-point entry.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <shardalg/mpi.hpp>

#include "all_to_allv_cases.hpp"

using namespace shardalg;
namespace a2av = testing::a2av;

TEST_CASE("MPI all_to_allv: random counts with zeros, four dtypes, on the world and on a split") {
  MpiComm world(MPI_COMM_WORLD);
  const int p = world.size();
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    CAPTURE(seed);
    const auto c = a2av::counts(p, 31 * seed + 5);
    Group g = world;
    CHECK(a2av::run_and_count_wrong<double>(g, c) == 0);
    CHECK(a2av::run_and_count_wrong<float>(g, c) == 0);
    CHECK(a2av::run_and_count_wrong<std::int64_t>(g, c) == 0);
    CHECK(a2av::run_and_count_wrong<std::int32_t>(g, c) == 0);
  }
  // On a sub-communicator (even and odd ranks).
  Group sub = world.split(world.rank() % 2, world.rank());
  CHECK(a2av::run_and_count_wrong<double>(sub, a2av::counts(sub.size(), 9)) == 0);
}

TEST_CASE("MPI all_to_allv: checked mode names the first pair whose counts disagree, on every rank") {
  MpiComm world(MPI_COMM_WORLD);
  Group g = world;
  std::string got = "ok";
  try {
    a2av::mismatched_counts(g);
  } catch (const CollectiveMismatchError& e) {
    got = e.what();
  }
  CHECK(got == std::string("MpiComm: ") + a2av::mismatched_counts_text);
  // The communicator is usable afterwards.
  CHECK(a2av::run_and_count_wrong<double>(g, a2av::counts(g.size(), 3)) == 0);
}

TEST_CASE("MPI isend/irecv: a ring both ways with the receives posted first; the ledger's entries") {
  MpiComm world(MPI_COMM_WORLD);
  Ledger ledger;
  Group g = ledgered(world, ledger);
  CHECK(g.async_p2p());
  CHECK(a2av::ring_exchange(g, 1000) == 0);
  const int p = g.size(), r = g.rank();
  REQUIRE(ledger.entries().size() == 4);
  const auto& e = ledger.entries();
  CHECK(e[0].kind == CollectiveKind::recv);
  CHECK(e[0].peer == (r + p - 1) % p);
  CHECK(e[1].peer == (r + 1) % p);
  CHECK(e[2].kind == CollectiveKind::send);
  CHECK(e[2].peer == (r + 1) % p);
  CHECK(e[3].peer == (r + p - 1) % p);
  CHECK(e[2].bytes == 1000 * sizeof(double));
  ledger.clear();
  const auto c = a2av::counts(p, 77);
  CHECK(a2av::run_and_count_wrong<double>(g, c, CallInfo{"Row", "Row"}) == 0);
  REQUIRE(ledger.entries().size() == 1);
  std::size_t sent = 0;
  for (auto k : c[static_cast<std::size_t>(r)]) sent += k;
  CHECK(ledger.entries()[0].kind == CollectiveKind::all_to_all);
  CHECK(ledger.entries()[0].elements == sent);
  CHECK(ledger.entries()[0].peer == -1);
}
