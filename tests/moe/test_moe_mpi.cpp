// tests/moe/test_moe_mpi.cpp — the MoE layer on MPI_COMM_WORLD (mpirun -np 2 and -np 4): every
// EP × ETP split of the world (np 2: 1 × 2, 2 × 1; np 4: 1 × 4, 2 × 2, 4 × 1), every case of
// moe_cases.hpp, against the dense twin (double ≤ 1e-12), and each rank's ledger beside the
// analytic count for the routing that occurred.
#include <mpi.h>

#include <doctest/doctest.h>

#include "moe_cases.hpp"
#include "shardalg/comm/mpi.hpp"

using namespace mc;

TEST_CASE("MPI: the MoE layer equals the dense twin at every EP x ETP of the world; the ledger is the analytic one") {
  const Group world(MpiComm(MPI_COMM_WORLD));
  const int p = world.size();
  for (const auto& c : cases()) {
    for (int e : {1, 2, 4}) {
      if (p % e != 0 || e > c.experts) continue;
      const int t = p / e;
      if (c.ffn % t != 0) continue;
      CAPTURE(c.name);
      CAPTURE(e);
      CAPTURE(t);
      const auto r = run_case<double>(world, e, t, c);
      for (const auto& ck : r.checks) CHECK_MESSAGE(ck.err.within(1e-12), ck.name << ": " << ck.err);
      const auto rm = make_ref<double>(c, 7);
      const auto ro = ref::moe_forward(rm, make_x<double>(c, 7));
      CHECK(std::abs(r.aux - ro.aux) <= 1e-12 * std::abs(ro.aux));
      const std::string why = ledger_mismatch(r, expected_ledger(c, ro, e, r.ep_rank), 8);
      CHECK_MESSAGE(why.empty(), "ledger: " << why);
    }
  }
}
