// 00 — The primer: what a ring collective costs, and when a GEMM waits for memory.
//
// Part 1 writes the ring reduce-scatter and all-gather by hand, with send and recv on P ThreadComm
// ranks, and counts what each rank sends in the ledger (observe/ledger.hpp): P − 1 messages of n/P
// bytes per phase, (P − 1)/P · n in all; an all-reduce is both phases, 2(P − 1)/P · n. The ledger
// records a library collective by its dense size V (n for all_reduce), not by what a rank sends;
// the ring factor relates the two. Part 2 (--measure) times all_reduce on ThreadComm and fits α
// and β (cost/calibrate.hpp). Part 3 is the roofline of one layer's GEMMs: FLOPs over bytes moved,
// in closed form, against a machine's balance (peak FLOP/s ÷ memory bandwidth); with --measure it
// also times an Eigen GEMM on this machine.
//
//   00_primer [--p 2,3,4,8] [--n 6144] [--h 4096] [--s 2048] [--b 4] [--measure]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "check.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/cost/alpha_beta.hpp"
#include "shardalg/cost/calibrate.hpp"
#include "shardalg/cost/transformer.hpp"
#include "shardalg/observe/ledger.hpp"

using namespace shardalg;
namespace cost = shardalg::cost;

namespace {

struct Args {
  std::vector<int> p = {2, 3, 4, 8};
  long n = 6144;  // bytes of the buffer every rank all-reduces
  long h = 4096, s = 2048, b = 4;
  bool measure = false;
};

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr, "00_primer: %s (--p --n --h --s --b --measure)\n", what);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--measure") {
      a.measure = true;
      continue;
    }
    if (f != "--p" && f != "--n" && f != "--h" && f != "--s" && f != "--b") usage(("unknown flag " + f).c_str());
    if (i + 1 >= argc) usage(("no value after " + f).c_str());
    const char* v = argv[++i];
    if (f == "--p") {
      a.p.clear();
      for (const char* c = v; *c;) {
        a.p.push_back(std::atoi(c));
        while (*c && *c != ',') ++c;
        if (*c == ',') ++c;
      }
    } else if (f == "--n") a.n = std::atol(v);
    else if (f == "--h") a.h = std::atol(v);
    else if (f == "--s") a.s = std::atol(v);
    else a.b = std::atol(v);
  }
  for (int p : a.p)
    if (p < 2 || a.n <= 0 || a.n % (8L * p) != 0)
      usage(("--n " + std::to_string(a.n) + " must be a positive multiple of 8·P bytes, P ≥ 2 (P = " + std::to_string(p) + ")").c_str());
  if (a.h < 1 || a.s < 1 || a.b < 1) usage("--h, --s and --b must be positive");
  return a;
}

/// What rank 0's ledger saw: the hand-written ring, and the library's all_reduce.
struct RingCount {
  std::size_t rs_sends = 0, rs_bytes = 0, ag_sends = 0, ag_bytes = 0;  // per rank (rank 0)
  std::size_t lib_calls = 0, lib_bytes = 0;                             // the library's all_reduce
  bool same_as_library = true, same_as_formula = true;                  // every rank, every value
};

RingCount ring(int P, long n_bytes) {
  const std::size_t N = static_cast<std::size_t>(n_bytes) / sizeof(double), c = N / static_cast<std::size_t>(P);
  RingCount out;
  std::mutex m;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger l;
    Group g = ledgered(comm, l);
    const int r = g.rank(), right = (r + 1) % P, left = (r + P - 1) % P;
    std::vector<double> x(N), in(c);
    for (std::size_t i = 0; i < N; ++i) x[i] = 1000.0 * r + static_cast<double>(i);  // integers: sums are exact
    std::vector<double> lib = x;
    const auto chunk = [&](long k) { return x.data() + static_cast<std::size_t>((k % P + P) % P) * c; };
    {
      auto sc = l.scope("reduce_scatter");  // step t: pass chunk r − t right, add chunk r − t − 1 from the left
      for (long t = 0; t < P - 1; ++t) {
        g.send(chunk(r - t), c, DType::f64, right);
        g.recv(in.data(), c, DType::f64, left);
        double* dst = chunk(r - t - 1);
        for (std::size_t i = 0; i < c; ++i) dst[i] += in[i];
      }
    }  // rank r now holds chunk r + 1 summed over all P ranks
    {
      auto sc = l.scope("all_gather");  // step t: pass the summed chunk r + 1 − t right, keep chunk r − t
      for (long t = 0; t < P - 1; ++t) {
        g.send(chunk(r + 1 - t), c, DType::f64, right);
        g.recv(chunk(r - t), c, DType::f64, left);
      }
    }
    {
      auto sc = l.scope("library");
      g.all_reduce(lib.data(), N, ReduceOp::sum);
    }
    bool same_lib = x == lib, same_formula = true;
    for (std::size_t i = 0; i < N; ++i)  // Σ_r (1000·r + i) = 1000·P(P − 1)/2 + P·i
      same_formula &= x[i] == 500.0 * P * (P - 1) + static_cast<double>(P) * static_cast<double>(i);
    std::lock_guard lk(m);
    out.same_as_library &= same_lib;
    out.same_as_formula &= same_formula;
    if (r != 0) return;
    out.rs_sends = l.count(CollectiveKind::send, "reduce_scatter");
    out.rs_bytes = l.bytes(CollectiveKind::send, "reduce_scatter");
    out.ag_sends = l.count(CollectiveKind::send, "all_gather");
    out.ag_bytes = l.bytes(CollectiveKind::send, "all_gather");
    out.lib_calls = l.count(CollectiveKind::all_reduce, "library");
    out.lib_bytes = l.bytes(CollectiveKind::all_reduce, "library");
  });
  return out;
}

/// One GEMM A[m, k] · B[k, n]: 2mkn FLOPs; at least e·(mk + kn + mn) bytes (read A and B, write C once).
struct Gemm {
  const char* name;
  double m, k, n, count;  // count: how many of them (per batch and head for attention)
  [[nodiscard]] double flops() const { return 2.0 * m * k * n * count; }
  [[nodiscard]] double bytes(double e) const { return e * (m * k + k * n + m * n) * count; }
  [[nodiscard]] double intensity(double e) const { return flops() / bytes(e); }
};

/// Columns a UTF-8 string takes (one per code point).
int columns(const char* u) {
  int n = 0;
  for (; *u; ++u) n += (static_cast<unsigned char>(*u) & 0xC0) != 0x80;
  return n;
}

/// Best of `reps` seconds of C = A·B in float on this thread.
double time_gemm(int n, int reps) {
  Eigen::MatrixXf A = Eigen::MatrixXf::Random(n, n), B = Eigen::MatrixXf::Random(n, n), C(n, n);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    C.noalias() = A * B;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!std::isfinite(C(0, 0))) std::printf("(non-finite)\n");  // keeps the product alive
  return best;
}

/// Best of `reps` seconds of copying `bytes` bytes (reads them and writes them: 2·bytes moved).
double time_copy(std::size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    a[static_cast<std::size_t>(i)] = static_cast<char>(i);
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (b[0] == 42) std::printf("(unlikely)\n");
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);

  // ---- Part 1: the ring, counted --------------------------------------------------------------
  std::printf("Part 1: a ring all-reduce of n = %ld bytes (%ld doubles) per rank, written with send and recv\n\n", a.n, a.n / 8);
  std::printf("  P   reduce-scatter      all-gather          sent per rank   2(P-1)/P·n   library all_reduce   2(P-1)/P·V\n");
  std::printf("      sends  bytes        sends  bytes        (ledger)        (formula)    ledger V             (cost model)\n");
  for (int P : a.p) {
    const RingCount rc = ring(P, a.n);
    const std::size_t n = static_cast<std::size_t>(a.n), step = n / static_cast<std::size_t>(P), Pm1 = static_cast<std::size_t>(P - 1);
    const std::size_t sent = rc.rs_bytes + rc.ag_bytes, formula = 2 * Pm1 * n / static_cast<std::size_t>(P);
    const double model = cost::all_reduce_bytes_per_rank(static_cast<double>(rc.lib_bytes), P);
    std::printf("  %-3d %5zu  %-12zu %5zu  %-12zu %-15zu %-12zu %-20zu %.0f\n", P, rc.rs_sends, rc.rs_bytes, rc.ag_sends, rc.ag_bytes,
                sent, formula, rc.lib_bytes, model);
    const std::string p = "P = " + std::to_string(P) + ": ";
    example::check(rc.same_as_library && rc.same_as_formula, p + "the hand-written ring sums exactly what all_reduce sums (Σ_r (1000r + i) on every rank)");
    example::check(rc.rs_sends == Pm1 && rc.ag_sends == Pm1 && rc.rs_bytes == Pm1 * step && rc.ag_bytes == Pm1 * step,
                   p + "each phase is P − 1 sends of n/P = " + std::to_string(step) + " bytes");
    example::check(rc.lib_calls == 1 && rc.lib_bytes == n && sent == formula && model == static_cast<double>(sent),
                   p + "the ledger records all_reduce as V = n; 2(P − 1)/P · V is what a rank sends");
  }
  std::printf("\n  Each rank sends 2(P − 1) messages of n/P bytes: 2(P − 1)/P · n, under 2n for any P. With a\n"
              "  latency α per message and a bandwidth β, one all-reduce takes\n"
              "    t = 2(P − 1)·α + 2(P − 1)/P · n/β\n"
              "  and a reduce-scatter or an all-gather half of it. The two terms are equal at n = P·α·β:\n"
              "  below that size latency dominates, above it bandwidth.\n\n");

  // ---- Part 2: α and β, measured --------------------------------------------------------------
  if (a.measure) {
    std::printf("Part 2: all_reduce on ThreadComm, measured (fastest of 15), beside the fitted α-β line\n\n");
    const std::vector<std::size_t> counts = {1 << 8, 1 << 12, 1 << 16, 1 << 20, 1 << 22};  // floats
    for (int P : a.p) {
      const auto cal = cost::calibrate_thread_all_reduce(P, counts);
      std::printf("  P = %d: α = %.2f µs, β = %.2f GB/s; latency = bandwidth at n = P·α·β = %.0f bytes\n", P,
                  cal.link.alpha_seconds * 1e6, cal.link.beta_bytes_per_second / 1e9,
                  P * cal.link.alpha_seconds * cal.link.beta_bytes_per_second);
      std::printf("    n (bytes)   measured     median       2(P-1)α + 2(P-1)/P·n/β   measured / formula\n");
      for (const auto& smp : cal.samples) {
        const double f = cal.all_reduce_seconds(smp.dense_bytes);
        std::printf("    %-10.0f  %8.1f µs  %8.1f µs  %10.1f µs               %.2f\n", smp.dense_bytes, smp.seconds * 1e6,
                    smp.median_seconds * 1e6, f * 1e6, smp.seconds / f);
      }
    }
    std::printf("\n");
  }

  // ---- Part 3: the roofline of one layer's GEMMs ----------------------------------------------
  const double e = 2;  // bf16 bytes per element
  const double T = static_cast<double>(a.b * a.s), h = static_cast<double>(a.h), s = static_cast<double>(a.s);
  const long heads = std::max(1L, a.h / 128);
  const double d = h / static_cast<double>(heads);
  // Machine balance: peak FLOP/s ÷ memory bandwidth.
  //   H100 SXM: 989 TFLOP/s dense bf16 (examples/07, tests/cost, docs/cuda.md) ÷ 3.35 TB/s HBM3 (H100 datasheet)
  //   V100 SXM: 125 TFLOP/s tensor core ÷ 900 GB/s HBM2 (both as examples/15 uses them)
  const double h100_flops = 989e12, h100_bw = 3.35e12, v100_flops = 125e12, v100_bw = 900e9;
  const double h100 = h100_flops / h100_bw, v100 = v100_flops / v100_bw;
  std::printf("Part 3: the roofline of one layer's GEMMs, b = %ld, s = %ld, h = %ld (T = b·s = %.0f tokens), bf16\n\n", a.b, a.s, a.h, T);
  std::printf("  machine balance  H100 SXM  989 TFLOP/s ÷ 3.35 TB/s = %.1f FLOP/byte\n", h100);
  std::printf("                   V100 SXM  125 TFLOP/s ÷ 900 GB/s  = %.1f FLOP/byte\n\n", v100);
  const Gemm g[] = {{"QKV      X[T,h]·W[h,3h]", T, h, 3 * h, 1},
                    {"proj     O[T,h]·W[h,h]", T, h, h, 1},
                    {"fc1      X[T,h]·W[h,4h]", T, h, 4 * h, 1},
                    {"fc2      H[T,4h]·W[4h,h]", T, 4 * h, h, 1},
                    {"scores   Q[s,d]·Kᵀ[d,s]", s, d, s, static_cast<double>(a.b * heads)},
                    {"context  P[s,s]·V[s,d]", s, s, d, static_cast<double>(a.b * heads)}};
  std::printf("  GEMM (d = %.0f, %ld heads)      FLOPs        bytes        FLOP/byte   on H100   on V100\n", d, heads);
  double total = 0;
  for (const auto& x : g) {
    total += x.flops();
    const double ai = x.intensity(e);
    std::printf("  %s%*s   %.3e    %.3e    %8.1f    %-8s  %s\n", x.name, 26 - columns(x.name), "", x.flops(), x.bytes(e), ai, ai >= h100 ? "compute" : "memory",
                ai >= v100 ? "compute" : "memory");
  }
  const cost::TransformerShape shape{.batch = a.b, .seq = a.s, .hidden = a.h, .heads = heads};
  std::printf("  sum                          %.3e\n\n", total);
  example::check(example::close(total, cost::layer_forward_flops(shape), 1e-12),
                 "Σ 2mkn over the six GEMMs = 24·b·s·h² + 4·b·s²·h (cost::layer_forward_flops)");

  // fc1 is compute-bound once 2·T·h·4h / (e·(T·h + 4h² + 4T·h)) ≥ B, i.e. T ≥ 4·B·e·h / (8h − 5·B·e).
  const double Tstar = 4 * h100 * e * h / (8 * h - 5 * h100 * e);
  const auto fc1 = [&](double t) { return Gemm{"", t, h, 4 * h, 1}.intensity(e); };
  std::printf("  fc1 reaches the H100's balance at T* = 4·B·e·h / (8h − 5·B·e) = %.1f tokens:\n", Tstar);
  std::printf("    T = %.0f: %.1f FLOP/byte, T = %.0f: %.1f FLOP/byte; one token (decoding): %.4f\n", std::floor(Tstar),
              fc1(std::floor(Tstar)), std::ceil(Tstar), fc1(std::ceil(Tstar)), fc1(1));
  example::check(fc1(std::floor(Tstar)) < h100 && fc1(std::ceil(Tstar)) >= h100, "the closed-form T* is where fc1 crosses the balance");
  example::check(example::close(fc1(1), 4 * h / (4 * h + 5), 1e-12), "one token: 8h² / (e·(4h² + 5h)) = 4h / (4h + 5) < 1 FLOP/byte (e = 2)");
  std::printf("\n  A weight GEMM's intensity grows with the tokens that share one read of W; at a few hundred\n"
              "  tokens it passes the balance and the GEMM waits for arithmetic, not memory. The attention\n"
              "  GEMMs share no weight across the batch: s·d/(s + 2d) < d FLOP/byte at any batch size.\n");

  if (a.measure) {
    std::printf("\n  This machine, measured (float, one thread, best of 3):\n");
    for (int n : {128, 256, 512, 1024}) {
      const double t = time_gemm(n, 3);
      const double flops = 2.0 * n * n * static_cast<double>(n);
      std::printf("    GEMM %4d × %4d × %4d: %7.2f GFLOP/s (intensity %.0f FLOP/byte)\n", n, n, n, flops / t / 1e9,
                  flops / (4.0 * 3 * n * n));
    }
    const std::size_t bytes = std::size_t{1} << 27;
    const double tc = time_copy(bytes, 5);
    std::printf("    memcpy of 128 MiB: %.2f GB/s (read + write)\n", 2.0 * static_cast<double>(bytes) / tc / 1e9);
  }
  return example::finish("00_primer");
}
