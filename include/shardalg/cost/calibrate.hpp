// shardalg/cost/calibrate.hpp — measure α and β on this machine.
//
// Time all-reduces of a few sizes on a group (ThreadComm, MpiComm, any Group), then fit the
// line t(V) = a + c·V by least squares and read the α-β model off it:
//
//   ring all-reduce:  t(V) = 2(P−1)·α + 2(P−1)/P · V/β     so   α = a / (2(P−1)),  β = 2(P−1)/(P·c)
//
// The fit weighs each sample by 1/t² (it minimises relative residuals), so that a 4 KB and a
// 4 MB all-reduce count alike; a and c are constrained to be ≥ 0. Each sample is the fastest
// repetition of the slowest rank's time (a collective ends when its last rank does; see
// measure_all_reduce for why the fastest).
//
//   auto cal = cost::calibrate_thread_all_reduce(4, {1 << 12, 1 << 16, 1 << 20});
//   cal.link.alpha_seconds, cal.link.beta_bytes_per_second
//
// With MPI: `cost::calibrate_all_reduce(Group(MpiComm(MPI_COMM_WORLD)), sizes)` on every rank.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/cost/alpha_beta.hpp"

namespace shardalg::cost {

struct TimingSample {
  double dense_bytes = 0;
  double seconds = 0;         // the fastest repetition: the uncontended time the model describes
  double median_seconds = 0;  // for reporting: how much the machine's load added
};

/// t(V) = intercept_seconds + seconds_per_byte · V.
struct LineFit {
  double intercept_seconds = 0;
  double seconds_per_byte = 0;

  [[nodiscard]] constexpr double seconds(double dense_bytes) const {
    return intercept_seconds + seconds_per_byte * dense_bytes;
  }
};

/// Weighted (1/t²) least squares with a, c ≥ 0. Needs at least two samples of distinct sizes.
inline LineFit fit_line(const std::vector<TimingSample>& samples) {
  double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
  for (const auto& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    S += w;
    Sx += w * s.dense_bytes;
    Sy += w * s.seconds;
    Sxx += w * s.dense_bytes * s.dense_bytes;
    Sxy += w * s.dense_bytes * s.seconds;
  }
  LineFit f;
  const double det = S * Sxx - Sx * Sx;
  if (det > 0) {
    f.seconds_per_byte = (S * Sxy - Sx * Sy) / det;
    f.intercept_seconds = (Sy - f.seconds_per_byte * Sx) / S;
  }
  if (f.intercept_seconds < 0) {  // latency not measurable: fit through the origin
    f.intercept_seconds = 0;
    f.seconds_per_byte = Sxx > 0 ? Sxy / Sxx : 0;
  }
  if (f.seconds_per_byte < 0) {  // bandwidth not measurable: a constant
    f.seconds_per_byte = 0;
    f.intercept_seconds = S > 0 ? Sy / S : 0;
  }
  return f;
}

/// The α-β model of a ring all-reduce on `p` ranks whose times follow `fit`.
/// (β is +∞ when the fit has no per-byte term; α is 0 for p = 1.)
constexpr AlphaBeta all_reduce_alpha_beta(const LineFit& fit, int p) {
  AlphaBeta ab;
  if (p <= 1) return ab;
  ab.alpha_seconds = fit.intercept_seconds / (2.0 * (p - 1));
  ab.beta_bytes_per_second = fit.seconds_per_byte > 0 ? 2.0 * (p - 1) / (p * fit.seconds_per_byte)
                                                      : std::numeric_limits<double>::infinity();
  return ab;
}

/// Collective: every rank of `g` calls it with the same arguments and gets the same samples: per
/// size, the slowest rank's time of each repetition, and of those the minimum (and the median).
/// The minimum because load from elsewhere on the machine only ever adds time, and adds more to
/// long collectives (a rank descheduled mid-copy stalls the others at the next barrier for a whole
/// time slice), so medians of large sizes bend the line on a busy machine; the fastest repetition
/// estimates the uncontended cost, which is what the α-β model describes. The sizes are
/// interleaved within each repetition, so a burst of load touches them all.
inline std::vector<TimingSample> measure_all_reduce(Group g, const std::vector<std::size_t>& element_counts,
                                                    int repetitions = 15, int warmup = 2) {
  using clock = std::chrono::steady_clock;
  const CallInfo info{"Partial", "R", true};  // calibration traffic: a ledger does not count it
  std::vector<std::vector<float>> bufs;
  for (const std::size_t n : element_counts) bufs.emplace_back(n, 1.0f);
  std::vector<std::vector<double>> times(element_counts.size());
  for (int r = 0; r < warmup + repetitions; ++r) {
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      auto& buf = bufs[i];
      g.barrier();
      const auto t0 = clock::now();
      g.all_reduce(buf.data(), buf.size(), ReduceOp::sum, info);
      double dt = std::chrono::duration<double>(clock::now() - t0).count();
      g.all_reduce(&dt, 1, ReduceOp::max, info);
      std::fill(buf.begin(), buf.end(), 1.0f);  // keep the values finite
      if (r >= warmup) times[i].push_back(dt);
    }
  }
  std::vector<TimingSample> out;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    auto& t = times[i];
    std::sort(t.begin(), t.end());
    out.push_back({static_cast<double>(bufs[i].size() * sizeof(float)), t.front(), t[t.size() / 2]});
  }
  return out;
}

struct Calibration {
  AlphaBeta link;
  LineFit fit;
  int group_size = 1;
  std::vector<TimingSample> samples;

  /// Predicted all-reduce time of a `dense_bytes` buffer on this group.
  [[nodiscard]] double all_reduce_seconds(double dense_bytes) const {
    return cost::all_reduce_seconds(link, dense_bytes, group_size);
  }
};

/// Collective on `g`: measure, fit, return the model (the same on every rank).
inline Calibration calibrate_all_reduce(Group g, const std::vector<std::size_t>& element_counts,
                                        int repetitions = 15) {
  Calibration c;
  c.group_size = g.size();
  c.samples = measure_all_reduce(g, element_counts, repetitions);
  c.fit = fit_line(c.samples);
  c.link = all_reduce_alpha_beta(c.fit, c.group_size);
  return c;
}

/// The same on `p` ThreadComm ranks of this process (the teaching default).
inline Calibration calibrate_thread_all_reduce(int p, const std::vector<std::size_t>& element_counts,
                                               int repetitions = 15) {
  Calibration result;
  run_ranks(p, [&](ThreadComm& comm) {
    Calibration c = calibrate_all_reduce(Group(comm), element_counts, repetitions);
    if (comm.rank() == 0) result = std::move(c);
  });
  return result;
}

}  // namespace shardalg::cost
