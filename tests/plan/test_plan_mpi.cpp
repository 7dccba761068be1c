// matmul<To> and redistribute<To> across processes (mpirun -np 2 and 4): the same laws as the
// thread test (plan_cases.hpp) on MpiComm; every rank asserts its own report.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "plan_cases.hpp"

using namespace shardalg;
using namespace plan_cases;

namespace {
void check(const Report& rep) {
  for (const auto& f : rep.failures) FAIL_CHECK(f);
  CHECK(rep.cases > 0);
}
}  // namespace

TEST_CASE("matmul<To> under MPI: every (A, B, To), transposes, value, ledger, adjoint") {
  Ledger ledger;
  Group g = ledgered(MpiComm(MPI_COMM_WORLD), ledger);
  Report rep;
  all_matmul_cases<double, false, false>(g, ledger, 11, rep);
  all_matmul_cases<double, true, false>(g, ledger, 12, rep);
  all_matmul_cases<double, false, true>(g, ledger, 13, rep);
  all_matmul_cases<double, true, true>(g, ledger, 14, rep);
  check(rep);
}

TEST_CASE("redistribute<To> under MPI: every (From, To), value, ledger, adjoint law") {
  Ledger ledger;
  Group g = ledgered(MpiComm(MPI_COMM_WORLD), ledger);
  Report rep;
  all_redistribute_cases<double>(g, ledger, 21, rep);
  all_redistribute_cases<float>(g, ledger, 22, rep);
  check(rep);
}
