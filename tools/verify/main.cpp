// shardalg-verify — build a small GPT from flags, run one forward and one backward pass sharded
// (ThreadComm ranks in this process, or MpiComm ranks under mpirun) and dense (the independent
// plain-Eigen reference, shardalg/reference/dense_layers.hpp), and report per layer:
//
//   * the normwise relative error of the output and of every gradient against the dense reference
//     (pass: ≤ 1e-12 in double, ≤ 1e-5 in float);
//   * the collectives the ledger recorded (count and bytes, forward and backward) beside the
//     analytic ones (cost/transformer.hpp and the layers' documented counts) — they must be equal;
//   * the communication time the α-β model predicts (α, β fitted at start-up on the same group)
//     beside the measured time of those collectives (reported, not asserted);
//   * the memory each rank holds (parameters, gradients, activations kept for backward), summed
//     from the tensors themselves.
//
// Exit status: 0 when every check passes, 1 when one fails, 2 for a bad configuration (one line
// on stderr naming the values; also a --trace file whose write fails), 3 for an internal error.
//
//   shardalg-verify                          TP=2 on threads, a 2-layer GPT, double
//   shardalg-verify --tp 4 --dtype float --json
//   shardalg-verify --tp 4 --dtype bf16      each block against the error bound derived from bf16
//                                            storage and fp32 arithmetic (precision.cpp; --dtype
//                                            float | double --bounds for fp32, fp64)
//   shardalg-verify --explain                block 0's derivation as executed
//   shardalg-verify --trace trace.json       Chrome trace (Perfetto / chrome://tracing)
//   mpirun -np 2 shardalg-verify --backend mpi
//   shardalg-verify --dp 2 --tp 2            a dp × tp mesh: DataParallelGpt on the global batch
//   mpirun -np 4 shardalg-verify --backend mpi --dp 2 --zero
//   shardalg-verify compare --ranks 'dump/rank*.safetensors' --reference dump/reference.safetensors --map map.json
//                                            another framework's run, from its tensors (compare.cpp)
//   shardalg-verify --pp 4 --schedule zb-h1 --trace t.json   a dp × pp × tp mesh: nn::PipelineGpt under a
//                                            schedule; the trace draws the schedule, one row per rank
//
// The files (tools/verify/): cli (flags), options (configuration and its checks), model (the dense
// masters and reference pass), precision (the rounding-bound check), run_rank + rows (one rank's
// run, rank 0's rows), explain_block
// (--explain), driver (ranks, progress, output), report_text / report_json, trace (--trace). The
// reusable parts — checks against a dense twin, ledger tallies, timing, explain log — are library
// headers: include/shardalg/verify/.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "cli.hpp"
#include "compare.hpp"
#include "driver.hpp"
#include "precision.hpp"

#if defined(SHARDALG_VERIFY_MPI)
#include "shardalg/comm/mpi.hpp"
#endif

using namespace sv;
using shardalg::Group;

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "compare") return compare_main(argc - 1, argv + 1);
  const Parsed parsed = parse_options(argc, argv);
  if (parsed.exit_code) return *parsed.exit_code;
  const Options& o = parsed.options;
  const bool tp_given = parsed.tp_given;

  int rank = 0, size = 1;
  std::optional<Group> world;
#if defined(SHARDALG_VERIFY_MPI)
  bool mpi = false;
#endif
  if (o.backend == "mpi") {
#if defined(SHARDALG_VERIFY_MPI)
    MPI_Init(&argc, &argv);
    mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    world.emplace(shardalg::MpiComm(MPI_COMM_WORLD));
#else
    fmt::print(stderr, "shardalg-verify: error: --backend mpi: this build has no MPI (configure with MPI found to get shardalg::mpi)\n");
    return 2;
#endif
  }
  auto finish = [&](int code) {
#if defined(SHARDALG_VERIFY_MPI)
    if (mpi) MPI_Finalize();
#endif
    return code;
  };

  int p = o.tp;
  try {
    if (world) {
      if (o.dp < 1 || size % o.dp != 0)
        throw ConfigError(shardalg::detail::cat("--dp ", o.dp, " does not divide the MPI process count ", size,
                                                " (under mpirun the processes form a dp × tp mesh)"));
      if (o.pp < 1 || (size / o.dp) % o.pp != 0)
        throw ConfigError(shardalg::detail::cat("--dp ", o.dp, " × --pp ", o.pp, " does not divide the MPI process count ", size,
                                                " (under mpirun the processes form a dp × pp × tp mesh)"));
      if (o.cp < 1 || (size / o.dp / o.pp) % o.cp != 0)
        throw ConfigError(shardalg::detail::cat("--dp ", o.dp, " × --cp ", o.cp, " does not divide the MPI process count ", size,
                                                " (under mpirun the processes form a dp × cp × tp mesh)"));
      if (o.cp > 1 && tp_given && std::int64_t{o.tp} * o.dp * o.cp * o.pp != size)
        throw ConfigError(shardalg::detail::cat("--tp ", o.tp, " × --dp ", o.dp, " × --cp ", o.cp, " differs from the MPI process count ", size));
      if (o.cp == 1 && tp_given && std::int64_t{o.tp} * (o.dp * o.pp) != size)  // dp·pp divides size (above): < 2^62
        throw ConfigError(shardalg::detail::cat("--tp ", o.tp, " × --dp ", o.dp, (o.pp > 1 ? shardalg::detail::cat(" × --pp ", o.pp) : std::string()),
                                                " differs from the MPI process count ", size,
                                                " (under mpirun the TP size is the process count over --dp", (o.pp > 1 ? " and --pp" : ""), ")"));
      p = size / o.dp / o.pp / o.cp;
    } else if (under_mpirun()) {
      throw ConfigError("running under mpirun with --backend thread; pass --backend mpi");
    }
    validate(o, p);
  } catch (const std::exception& e) {
    if (rank == 0) fmt::print(stderr, "shardalg-verify: error: {}\n", e.what());
    return finish(2);
  }

  try {
    const int code = o.bounds_mode() ? run_bounds(o, p) : run(o, p, world ? &*world : nullptr, rank);
    return finish(code);
  } catch (const ConfigError& e) {  // the --trace file could not be written (rank 0, after the report)
    fmt::print(stderr, "shardalg-verify: error: {}\n", e.what());
    return finish(2);
  } catch (const std::exception& e) {
    fmt::print(stderr, "shardalg-verify: internal error on rank {}: {}\n", rank, e.what());
#if defined(SHARDALG_VERIFY_MPI)
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 3);
#endif
    return 3;
  }
}
