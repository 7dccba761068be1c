// run_mpi: an error on one rank ends the whole job. Rank 1 adopts a local block that is not its
// share (a GroupSizeError on rank 1 only) while rank 0 goes on into an all-gather and waits for
// rank 1 there. Without run_mpi, rank 0 would wait forever. With it, rank 1 prints one line,
// "shardalg: rank 1: Sharded<RowSharded>: local block 3x2 is not rank 1's share of 4x2 on a group
// of size 2 (expected 2x2)", and MPI_Abort ends both processes with a non-zero exit
// (tests/mpi/expect_abort.cmake checks all three: it ends, non-zero, that one line).
//
// `abort_on_error ok`: every rank shards the same matrix; the run returns fn's int, 0 when the
// gathered matrix is right (the success path: MPI finalized, exit 0).
//
// `abort_on_error unwind` (unchecked): rank 1 posts a receive from rank 0 and throws while rank 0
// waits in a receive from rank 1. The Request is cancelled as the error unwinds (waiting for it
// would deadlock both), so run_mpi's line and abort end the job.
// `abort_on_error dropped` (checked, rank 0's watchdog 1 s): rank 0 destroys an unfinished receive
// whose send never comes; the watchdog's timeout cannot leave the destructor, so it ends the job
// with one line itself (comm/mpi_p2p.hpp).
#include <cstdio>
#include <stdexcept>
#include <string>

#include <shardalg/mpi.hpp>

namespace {
int unwind(shardalg::MpiComm world) {
  shardalg::set_check_collectives(false);
  shardalg::Group g = world;
  double x = 0;
  if (world.rank() == 0) g.recv(&x, 1, shardalg::DType::f64, 1);  // never sent: rank 1 fails first
  if (world.rank() == 1) {
    shardalg::Request posted = g.irecv(&x, 1, shardalg::DType::f64, 0);
    throw std::runtime_error("rank 1 failed with a receive posted");
  }
  return 0;
}
int dropped(shardalg::MpiComm world) {
  shardalg::set_check_collectives(true);
  shardalg::set_collective_timeout(world.rank() == 0 ? 1.0 : 30.0);
  shardalg::Group g = world;
  double x = 0;
  if (world.rank() == 0) {
    shardalg::Request never = g.irecv(&x, 1, shardalg::DType::f64, 1);
  }  // destroyed here, unfinished
  g.barrier();
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unwind") return shardalg::run_mpi(argc, argv, unwind);
  if (mode == "dropped") return shardalg::run_mpi(argc, argv, dropped);
  const bool ok = mode == "ok";
  return shardalg::run_mpi(argc, argv, [ok](shardalg::MpiComm world) {
    using M = shardalg::CpuBackend::matrix<double>;
    shardalg::Group g = world;
    const shardalg::Index rows = 2 * world.size();
    const M a = M::Constant(rows, 2, 1.0);
    // Rank 1 claims three rows of a 4-row matrix (its share is two): it throws unless ok.
    const auto x = (!ok && world.rank() == 1) ? shardalg::Sharded<double, shardalg::RowSharded>(M::Constant(3, 2, 1.0), rows, 2, g)
                                              : shardalg::shard<shardalg::RowSharded>(a, g);
    const auto whole = shardalg::all_gather(x);                  // rank 0 waits here for rank 1
    if (world.rank() == 0)
      std::printf("gathered %ldx%ld\n", static_cast<long>(whole.rows()), static_cast<long>(whole.cols()));
    return whole.local() == a ? 0 : 3;
  });
}
