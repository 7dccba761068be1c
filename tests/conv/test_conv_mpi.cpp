// tests/conv/test_conv_mpi.cpp — the spatially sharded convolution on MPI_COMM_WORLD (run under
// mpirun -np 2 and -np 4): forward and every gradient bit for bit against the dense direct-loop
// convolution for k 1, 3, 5; the ledger's halo bytes against 2·⌊k/2⌋·N·W·C_in per interior rank and
// pass; and a halo of 64 KiB per message, above Open MPI's eager limits, so that MPI_Send waits for
// its receive and the exchange's order is what keeps it from deadlocking.
#include <mpi.h>

#include <doctest/doctest.h>

#include "conv_cases.hpp"
#include "shardalg/comm/mpi.hpp"

namespace {
using namespace ct;

Group world() { return Group(MpiComm(MPI_COMM_WORLD)); }

void check_exact(const Run& r, const Expected& e) {
  CHECK(compare(r.y, e.y).max_abs == 0);
  CHECK(compare(r.dx, e.dx).max_abs == 0);
  CHECK(compare(r.dw, e.dw).max_abs == 0);
  CHECK(compare(r.dw_partial_sum, e.dw).max_abs == 0);
  if (e.db.size() != 0) CHECK(compare(r.db, e.db).max_abs == 0);
  CHECK(r.dw_replicas_agree);
}
}  // namespace

TEST_CASE_TEMPLATE("MPI: Conv2d equals the dense convolution, and the halo bytes equal the formula", T, float, double) {
  const int p = world().size();
  for (const Index k : {Index(1), Index(3), Index(5)})
    for (const Index n : {Index(1), Index(2)}) {
      const Case c{.n = n, .h = 12, .w = 5, .cin = 2, .cout = 3, .k = k, .seed = static_cast<std::uint64_t>(40 + k + n)};
      const Run run = run_conv<T>(world(), c);
      CAPTURE(k);
      CAPTURE(n);
      check_exact(run, expected(c));
      const std::size_t message = static_cast<std::size_t>((k / 2) * n * c.w * c.cin);
      const std::size_t msgs = k > 1 ? neighbours(run.rank, p) : 0;
      CHECK(run.fwd.sends == msgs);
      CHECK(run.fwd.recvs == msgs);
      CHECK(run.fwd.send_bytes == msgs * message * sizeof(T));
      CHECK(run.bwd.send_bytes == msgs * message * sizeof(T));
      CHECK(run.fwd.wrong_layouts == 0);
      CHECK(run.bwd.wrong_layouts == 0);
      CHECK(run.fwd.others.empty());
      CHECK(run.bwd.others.empty());
      if (run.rank > 0 && run.rank + 1 < p) CHECK(run.fwd.send_bytes == 2 * static_cast<std::size_t>(k / 2) * n * 5 * 2 * sizeof(T));
      REQUIRE(run.reduce.size() == 2);
      CHECK(run.reduce[0].elements == static_cast<std::size_t>(k * k * c.cin * c.cout));
    }
}

TEST_CASE("MPI: a halo of 64 KiB per message (MPI_Send waits for its receive) completes and is exact") {
  // k = 5: r = 2 rows of W·C_in = 64·64 doubles = 65,536 bytes per message.
  const Case c{.n = 1, .h = 8, .w = 64, .cin = 64, .cout = 2, .k = 5, .seed = 77};
  const Run run = run_conv<double>(world(), c);
  check_exact(run, expected(c));
  if (run.size > 1) CHECK(run.fwd.message_elements_max * sizeof(double) == 65536);
}
