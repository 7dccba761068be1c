// tests/gpt/test_gpt_mpi.cpp — the loss-curve equality on MPI_COMM_WORLD (mpirun -np 2 and 4):
// every process also trains the model alone (SelfComm, TP=1) and compares the curves of the TP
// run, with and without sequence parallelism, step by step.
#include <mpi.h>

#include <doctest/doctest.h>

#include "gpt_cases.hpp"
#include "shardalg/comm/mpi.hpp"

using namespace gt;

TEST_CASE_TEMPLATE("MPI: training gives the TP=1 loss curve, with and without sequence parallelism", T, float, double) {
  constexpr int kSteps = 8;
  const double bound = std::is_same_v<T, double> ? 1e-9 : 1e-4;
  const Group world(MpiComm(MPI_COMM_WORLD));
  const auto base = train<T>(tiny(false), Group(SelfComm{}), kSteps);
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    const auto curve = train<T>(tiny(sp), world, kSteps);
    const double d = curve_diff(curve, base);
    CHECK_MESSAGE(d <= bound, "TP=" << world.size() << (sp ? " SP" : "") << ": relative difference " << d);
  }
  CHECK(base.back() < base.front());
}
