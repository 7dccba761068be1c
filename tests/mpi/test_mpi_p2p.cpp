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

// ---- Checked point to point (comm/mpi_p2p.hpp): a header before the data, compared by the
// receive; the watchdog on every wait ----

namespace {
/// Rank 1's error text from a body run by ranks 0 and 1 (the others skip it), shared by all.
template <class Body>
std::string rank1_error(MpiComm& world, Body body) {
  std::string err = "ok";
  if (world.rank() <= 1) {
    try {
      Group g = world;
      body(g);
    } catch (const CommError& e) {
      err = e.what();
    }
  }
  world.barrier();
  return err;
}
}  // namespace

TEST_CASE("MPI checked: a message of other dtype, count or shape is a mismatch on the receiver, before any data lands") {
  MpiComm world(MPI_COMM_WORLD);
  // Three int64 read as three doubles (equal bytes).
  double kept = -1;
  std::string err = rank1_error(world, [&](Group& g) {
    if (g.rank() == 0) {
      const std::int64_t shape[3] = {8, 1, 16};
      g.send(shape, 3, DType::i64, 1);
    } else {
      double x[3] = {-1, -1, -1};
      try {
        g.recv(x, 3, DType::f64, 0);
      } catch (...) {
        kept = x[0] + x[1] + x[2];
        throw;
      }
    }
  });
  if (world.rank() == 1) {
    CHECK(err == "MpiComm: mismatched point-to-point: rank 1 receives f64 × 3 from rank 0, which sent i64 × 3");
    CHECK(kept == -3.0);
  }
  // More elements than the receive holds: a mismatch, not MPI_ERR_TRUNCATE's abort.
  err = rank1_error(world, [&](Group& g) {
    std::vector<double> x(8, 1.0);
    if (g.rank() == 0) g.send(x.data(), 8, DType::f64, 1);
    else g.recv(x.data(), 6, DType::f64, 0);
  });
  if (world.rank() == 1)
    CHECK(err == "MpiComm: mismatched point-to-point: rank 1 receives f64 × 6 from rank 0, which sent f64 × 8");
  // A pipeline activation of the same bytes and another micro-batch shape (irecv, waited).
  err = rank1_error(world, [&](Group& g) {
    std::vector<double> x(128, 1.0);
    CallInfo sent{"R", "R"}, want{"R", "R"};
    sent.dims = {8, 1, 16};
    want.dims = {4, 2, 16};
    if (g.rank() == 0) g.send(x.data(), 128, DType::f64, 1, sent);
    else g.irecv(x.data(), 128, DType::f64, 0, want).wait();
  });
  if (world.rank() == 1)
    CHECK(err ==
          "MpiComm: mismatched point-to-point: rank 1 receives f64 × 128, layout R, shape (4, 2, 16) from rank 0, which "
          "sent f64 × 128, layout R, shape (8, 1, 16)");
}

TEST_CASE("MPI checked: receives waited for out of order each take their own message") {
  MpiComm world(MPI_COMM_WORLD);
  const std::string err = rank1_error(world, [&](Group& g) {
    if (g.rank() == 0) {
      const double a[2] = {1, 2}, b[3] = {3, 4, 5};
      g.send(a, 2, DType::f64, 1);
      g.send(b, 3, DType::f64, 1);
    } else {
      double a[2] = {}, b[3] = {};
      Request ra = g.irecv(a, 2, DType::f64, 0), rb = g.irecv(b, 3, DType::f64, 0);
      rb.wait();
      ra.wait();
      if (a[0] != 1 || a[1] != 2 || b[0] != 3 || b[2] != 5) throw CommError("wrong values");
    }
  });
  CHECK(err == "ok");
}

TEST_CASE("MPI checked: a receive whose send never comes raises after the watchdog's limit") {
  MpiComm world(MPI_COMM_WORLD);
  const std::string err = rank1_error(world, [&](Group& g) {
    double x = 0;
    if (g.rank() != 1) return;
    set_collective_timeout(0.3);  // this process's watchdog only: the others wait in the barrier after
    try {
      g.recv(&x, 1, DType::f64, 0);
    } catch (...) {
      set_collective_timeout(60);
      throw;
    }
  });
  if (world.rank() == 1)
    CHECK(err == "MpiComm: rank 1 waited more than 0.3 s in recv of f64 × 1 from rank 0; the communicator is unusable now");
}
