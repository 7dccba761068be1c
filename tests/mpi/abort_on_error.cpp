// run_mpi (issue 12, item B): an error on one rank ends the whole job. Rank 1 shards a matrix
// whose rows do not divide (a DivisibilityError on rank 1 only) while rank 0 goes on into an
// all-gather and waits for rank 1 there. Without run_mpi, rank 0 would wait forever. With it,
// rank 1 prints one line, "shardalg: rank 1: shard<RowSharded>: rows 3 is not divisible by group
// size 2", and MPI_Abort ends both processes with a non-zero exit (tests/mpi/expect_abort.cmake
// checks all three: it ends, non-zero, that one line).
//
// `abort_on_error ok`: every rank shards the same matrix; the run returns fn's int, 0 when the
// gathered matrix is right (the success path: MPI finalized, exit 0).
#include <cstdio>
#include <cstring>

#include <shardalg/mpi.hpp>

int main(int argc, char** argv) {
  const bool ok = argc > 1 && std::strcmp(argv[1], "ok") == 0;
  return shardalg::run_mpi(argc, argv, [ok](shardalg::MpiComm world) {
    using M = shardalg::CpuBackend::matrix<double>;
    shardalg::Group g = world;
    const shardalg::Index rows = (!ok && world.rank() == 1) ? 3 : 2 * world.size();
    const M a = M::Constant(rows, 2, 1.0);
    const auto x = shardalg::shard<shardalg::RowSharded>(a, g);  // throws on rank 1 unless ok
    const auto whole = shardalg::all_gather(x);                  // rank 0 waits here for rank 1
    if (world.rank() == 0)
      std::printf("gathered %ldx%ld\n", static_cast<long>(whole.rows()), static_cast<long>(whole.cols()));
    return whole.local() == a ? 0 : 3;
  });
}
