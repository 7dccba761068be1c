// The overlapped column-parallel backward across processes: MpiComm starts the all-reduce with
// MPI_Iallreduce, the weight-gradient GEMM runs in chunks with MPI_Test between them.
#include <doctest/doctest.h>

#include <shardalg/mpi.hpp>

#include "overlap_cases.hpp"

using namespace shardalg;
using ov::Overlap;

namespace {
void check_exact(const ov::Result& r) {
  for (const auto& e : r.errors) {  // no structured binding: CAPTURE captures it (Clang 14)
    CAPTURE(e.first);
    CHECK(e.second == 0.0);
  }
}
int world_min(int v) {
  int out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return out;
}
int world_max(int v) {
  int out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out;
}
}  // namespace

TEST_CASE("MPI: iall_reduce completes by test() and equals the closed-form sum") {
  for (std::size_t n : {std::size_t{1}, std::size_t{1001}, std::size_t{1} << 20}) {
    CAPTURE(n);
    const auto r = ov::raw_iall_reduce(MpiComm(MPI_COMM_WORLD), n);
    check_exact(r);
    CHECK(r.all_reduces == 1);
    CHECK(r.all_reduce_elements == n);
    CHECK(r.async);
  }
}

TEST_CASE_TEMPLATE("MPI: overlapped ColumnParallelLinear backward equals the dense gradients exactly", T, float, double) {
  for (int chunks : {1, 3, 4, 7, 40}) {
    CAPTURE(chunks);
    const auto r = ov::column_linear<T>(MpiComm(MPI_COMM_WORLD), {Overlap::on, chunks}, 3);
    check_exact(r);
    CHECK(r.all_reduces == 3);
    CHECK(r.all_reduce_elements == 3u * 20 * 12);
  }
}

TEST_CASE("MPI: Overlap::automatic calibrates once, every rank takes the same decision") {
  const auto r = ov::column_linear<double>(MpiComm(MPI_COMM_WORLD), {Overlap::automatic, 4}, 9);
  check_exact(r);
  REQUIRE(r.chosen.has_value());
  CHECK(world_min(*r.chosen ? 1 : 0) == world_max(*r.chosen ? 1 : 0));
  CHECK(r.all_reduces == 9);  // the calibration's 2-value all-reduce is not the algebra's traffic
}

TEST_CASE("MPI: MLP and block with overlap on equal the sequential schedule") {
  // The only differences: dW1 summed in token chunks, dX reduced by MPI_Iallreduce instead of
  // MPI_Allreduce (its own order for P > 2); the bound is a few ulps of the gradients' size.
  for (const auto& r : {ov::mlp(MpiComm(MPI_COMM_WORLD)), ov::block(MpiComm(MPI_COMM_WORLD))})
    for (const auto& e : r.errors) {
      CAPTURE(e.first);
      CHECK(e.second <= 1e-13);
    }
}
