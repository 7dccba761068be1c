// bench/ring_attention — ring attention (nn/layers/ring_attention.hpp) with the next K/V block's
// receive posted before the block's compute (overlap) against waited first (blocking), and the
// all-to-all variant beside them; forward + backward per step, the median of `reps` steps.
// Run by hand (docs/layers/context_parallel.md quotes it):
//
//   build/bench/bench_ring_attention [cp=4] [seq=2048] [reps=7]                 ThreadComm, cp threads
//   mpirun -np 4 build/bench/bench_ring_attention mpi [seq=2048] [reps=7]       MpiComm, one process a rank
//
// Shape: batch 1, 8 heads of 64 (MHA), double. Each line: the variant, the median step time of
// the slowest rank, and its ratio to the blocking ring.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <shardalg/comm/run_ranks.hpp>
#include <shardalg/nn/layers/ulysses_attention.hpp>
#if defined(SHARDALG_BENCH_MPI)
#include <shardalg/mpi.hpp>
#endif

using namespace shardalg;
using RA = nn::RingAttention<double>;
using UA = nn::UlyssesAttention<double>;

namespace {

RA::Mat random(Index r, Index c, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> u;
  RA::Mat m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(g);
  return m;
}

/// Median seconds per forward + backward of `variant` (0 ring overlapped, 1 ring blocking, 2 a2a),
/// the slowest rank's (a max all-reduce per step).
double median_step(Group& g, Index seq, int reps, int variant) {
  const Index heads = 8, d = 64;
  const nn::CpTokens tok{seq, 1, g.size(), g.rank()};
  const auto q = random(tok.rows(), heads * d, 1), k = random(tok.rows(), heads * d, 2), v = random(tok.rows(), heads * d, 3);
  const auto dout = random(tok.rows(), heads * d, 4);
  const nn::RingAttentionConfig cfg{heads, heads, d, variant == 0};
  std::vector<double> ts;
  for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (variant < 2) {
      const auto f = RA::forward(g, tok, cfg, q, k, v);
      (void)RA::backward(g, tok, cfg, q, k, v, f, dout);
    } else {
      const auto f = UA::forward(g, tok, cfg, q, k, v);
      (void)UA::backward(g, tok, cfg, f, dout);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g.all_reduce(&s, 1, ReduceOp::max);
    if (r > 0) ts.push_back(s);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

void report(Group& g, const char* comm, Index seq, int reps) {
  const double blocking = median_step(g, seq, reps, 1), overlap = median_step(g, seq, reps, 0), a2a = median_step(g, seq, reps, 2);
  if (g.rank() != 0) return;
  std::printf("%s, cp %d, sequence %ld, 8 heads of 64, double: forward + backward per step, median of %d\n", comm, g.size(),
              static_cast<long>(seq), reps);
  std::printf("  ring, blocking receives   %9.2f ms   1.00\n", blocking * 1e3);
  std::printf("  ring, overlapped receives %9.2f ms   %.2f\n", overlap * 1e3, overlap / blocking);
  std::printf("  all-to-all                %9.2f ms   %.2f\n", a2a * 1e3, a2a / blocking);
}

}  // namespace

int main(int argc, char** argv) {
  const bool mpi = argc > 1 && std::strcmp(argv[1], "mpi") == 0;
  const int first = mpi ? 2 : 1;
  const int cp = !mpi && argc > first ? std::atoi(argv[first]) : 4;
  const Index seq = argc > first + (mpi ? 0 : 1) ? std::atol(argv[first + (mpi ? 0 : 1)]) : 2048;
  const int reps = argc > first + (mpi ? 1 : 2) ? std::atoi(argv[first + (mpi ? 1 : 2)]) : 7;
  if (mpi) {
#if defined(SHARDALG_BENCH_MPI)
    MPI_Init(&argc, &argv);
    {
      Group g(MpiComm(MPI_COMM_WORLD));
      report(g, "MpiComm", seq, reps);
    }
    MPI_Finalize();
    return 0;
#else
    std::fprintf(stderr, "bench_ring_attention: built without MPI\n");
    return 2;
#endif
  }
  run_ranks(cp, [&](ThreadComm& c) {
    Group g(c);
    report(g, "ThreadComm", seq, reps);
  });
}
