// Issue 14 under MPI (np 2): the mismatched collectives of tests/support/mismatch_cases.hpp raise
// CollectiveMismatchError on both ranks with the same text, before any data moves, instead of
// hanging or giving wrong results; a rank whose peer skips the collective raises
// CollectiveTimeoutError (the watchdog). Checked mode is on (tests/support/doctest_mpi_main.cpp).
// Each case runs on a communicator of its own (a split of MPI_COMM_WORLD): after a timeout the
// communicator it happened on is unusable.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <shardalg/mpi.hpp>

#include "mismatch_cases.hpp"

using namespace shardalg;
namespace mm = testing::mismatch;

namespace {
/// What body raised on this rank, as "<Type>: <what()>" ("ok" when nothing).
template <class Body>
std::string outcome(Body body) {
  try {
    body();
  } catch (const CollectiveMismatchError& e) {
    return std::string("CollectiveMismatchError: ") + e.what();
  } catch (const CollectiveTimeoutError& e) {
    return std::string("CollectiveTimeoutError: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "ok";
}
struct Timeout {
  explicit Timeout(double s) { set_collective_timeout(s); }
  ~Timeout() { set_collective_timeout(60); }
};
}  // namespace

TEST_CASE("MPI checked: each mismatch case raises CollectiveMismatchError on both ranks, naming both sides") {
  REQUIRE(check_collectives());
  MpiComm world(MPI_COMM_WORLD);
  if (world.size() != 2) return;  // the cases are written for 2 ranks
  for (const auto& k : mm::cases()) {
    CAPTURE(k.name);
    Group g = world.split(0, world.rank());
    const std::string got = outcome([&] { k.body(g); });
    CHECK(got == std::string("CollectiveMismatchError: MpiComm: ") + k.checked);
    // The fingerprint exchange completed: the communicator still works.
    double x = 1.0;
    g.all_reduce(&x, 1);
    CHECK(x == 2.0);
  }
}

TEST_CASE("MPI checked: a rank that skips a collective — the watchdog raises on the rank left waiting") {
  MpiComm world(MPI_COMM_WORLD);
  if (world.size() != 2) return;
  Timeout t(0.5);
  {
    Group g = world.split(0, world.rank());
    const std::string got = outcome([&] {
      if (g.rank() == 0) mm::all_reduce_f64(g, 8);  // rank 1 skips it
    });
    if (g.rank() == 0)
      CHECK(got ==
            "CollectiveTimeoutError: MpiComm: rank 0 waited more than 0.5 s in all_reduce f64 × 8 (#1); rank 1 did "
            "not arrive; the communicator is unusable now");
    else
      CHECK(got == "ok");
  }  // the sub-communicator (unusable now) is freed
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("MPI checked: the matching calls still run, and the fingerprints are not in the ledger") {
  MpiComm world(MPI_COMM_WORLD);
  Group plain = world.split(0, world.rank());
  Ledger l;
  Group g = ledgered(plain, l);
  std::vector<double> x(8, 1.0), y(8 * static_cast<std::size_t>(g.size()));
  g.all_reduce(x.data(), 8);
  g.all_gather(x.data(), y.data(), 8);
  g.barrier();
  CHECK(x[0] == g.size());
  CHECK(l.count() == 2);  // the two collectives, not the fingerprint exchange
}
