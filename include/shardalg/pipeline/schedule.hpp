// shardalg/pipeline/schedule.hpp — pipeline-parallel schedules as data.
//
// A model of S stages runs on p pipeline ranks; a global batch is cut into m micro-batches. Each
// micro-batch j goes forward through the stages 0, 1, …, S−1 and backward through S−1, …, 0. A
// schedule says, for every rank, in which order it runs its ops:
//
//   F(j, c)   forward of micro-batch j through this rank's model chunk c
//   B(j, c)   backward, input gradient only: dL/dx, what the previous stage waits for
//   W(j, c)   backward, weight gradient only: dL/dW, which no other stage waits for
//   BW(j, c)  B and W fused: the ordinary backward pass
//
// With v model chunks per rank (the interleaved schedule), S = v·p and chunk c of rank r is
// stage c·p + r: the stages go round the ranks v times. Without interleaving v = 1, S = p and
// rank r is stage r.
//
// The builders below return the four schedules of the literature. Their bubble (idle time while
// a rank waits for its neighbours) and their activation memory are what separate them; with unit
// costs t_F = t_B = t_W = 1 and the normalisation of Narayanan et al. 2021 (bubble time / ideal
// time, ideal = m·(t_F + t_B + t_W) per rank):
//
//   schedule            bubble / ideal     activations held on rank r (an activation lives
//                                           from its F until its W or BW)
//   afab (GPipe)        (p − 1)/m          m
//   one_f_one_b         (p − 1)/m          min(p − r, m)
//   interleaved_1f1b    (p − 1)/(v·m)      min(2(p − r − 1) + (v − 1)·p + 1, v·m) chunk
//                                           activations (v·m when m = p), each 1/v of a stage
//   zb_h1               (p − 1)/(3m)       min(p, m) on every rank (m ≥ p for the bubble)
//
// simulate.hpp runs a schedule and measures these numbers; tests/pipeline checks them against
// the closed forms. A schedule is plain data, so a hand-written one is checked the same way:
// check_valid() below, then the simulator (which reports a deadlock by name).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardalg/pipeline/errors.hpp"

namespace shardalg::pipeline {

namespace detail {
using ::shardalg::detail::cat;  // cat(a, b, …): the arguments streamed into one string
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// The data
// ---------------------------------------------------------------------------------------------

enum class OpKind { F, B, W, BW };

inline std::string_view kind_name(OpKind k) {
  switch (k) {
    case OpKind::F: return "F";
    case OpKind::B: return "B";
    case OpKind::W: return "W";
    case OpKind::BW: return "BW";
  }
  return "?";
}

/// One op of one rank: its kind, its micro-batch (0 … m−1) and its model chunk (0 … v−1).
struct Op {
  OpKind kind = OpKind::F;
  int microbatch = 0;
  int chunk = 0;
  friend bool operator==(const Op&, const Op&) = default;
};

/// "F(mb 3, chunk 0)": how errors and reports name an op.
inline std::string describe(const Op& op) {
  return detail::cat(kind_name(op.kind), "(mb ", op.microbatch, ", chunk ", op.chunk, ")");
}

/// A schedule: for each of the p ranks, the ops it runs, in order.
struct Schedule {
  std::string name;                   // "AFAB", "1F1B", "interleaved 1F1B", "ZB-H1", or yours
  int p = 0;                          // pipeline ranks
  int m = 0;                          // micro-batches
  int v = 1;                          // model chunks per rank
  std::vector<std::vector<Op>> ranks; // ranks[r] = rank r's ops in execution order

  /// The pipeline stage that rank `rank`'s chunk `chunk` holds: chunk·p + rank.
  int stage(int rank, int chunk) const { return chunk * p + rank; }
  int stages() const { return v * p; }
};

// ---------------------------------------------------------------------------------------------
// Argument checks
// ---------------------------------------------------------------------------------------------

/// The largest p·m·v a builder accepts: each rank's list has up to 3·m·v ops, so this bounds the
/// memory of a schedule (a mistyped m = 10^9 is refused by name instead of exhausting memory).
inline constexpr std::int64_t max_ops_per_kind = 10'000'000;

namespace detail {
inline void check_sizes(std::string_view fn, int p, int m, int v) {
  if (p < 1) throw PipelineError(cat("pipeline::", fn, ": p = ", p, " pipeline ranks; need p >= 1"));
  if (m < 1) throw PipelineError(cat("pipeline::", fn, ": m = ", m, " micro-batches; need m >= 1"));
  if (v < 1) throw PipelineError(cat("pipeline::", fn, ": v = ", v, " model chunks per rank; need v >= 1"));
  const std::int64_t n = std::int64_t{p} * m * v;
  if (n > max_ops_per_kind)
    throw PipelineError(cat("pipeline::", fn, ": p·m·v = ", p, "·", m, "·", v, " = ", n,
                            " is more than the limit of ", max_ops_per_kind));
}
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// The builders
// ---------------------------------------------------------------------------------------------

/// All forward, all backward (GPipe, Huang et al. 2019): every rank runs F of all m
/// micro-batches, then their fused backward BW, both in micro-batch order.
///
/// The last rank starts its first F after p − 1 forward slots and rank 0 ends its last BW p − 1
/// backward slots after the last rank: bubble (p − 1)(t_F + t_B + t_W) per rank, (p − 1)/m of
/// the ideal m(t_F + t_B + t_W). Every rank holds all m activations when its forwards end.
inline Schedule afab(int p, int m) {
  detail::check_sizes("afab", p, m, 1);
  Schedule s{"AFAB", p, m, 1, std::vector<std::vector<Op>>(p)};
  for (auto& ops : s.ranks) {
    for (int j = 0; j < m; ++j) ops.push_back({OpKind::F, j, 0});
    for (int j = 0; j < m; ++j) ops.push_back({OpKind::BW, j, 0});
  }
  return s;
}

/// One forward, one backward (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's
/// forward_backward_pipelining_without_interleaving).
///
/// Rank r first runs w = min(p − r − 1, m) forwards (the warm-up: the micro-batches that reach
/// the last stage before rank r's first backward can come back), then alternates one F and one
/// BW (the steady state) until its forwards are done, then runs the remaining BWs (the
/// cool-down). The bubble is the same as AFAB's, (p − 1)/m, but rank r never holds more than
/// w + 1 = min(p − r, m) activations instead of m: the gain is memory.
inline Schedule one_f_one_b(int p, int m) {
  detail::check_sizes("one_f_one_b", p, m, 1);
  Schedule s{"1F1B", p, m, 1, std::vector<std::vector<Op>>(p)};
  for (int r = 0; r < p; ++r) {
    auto& ops = s.ranks[r];
    const int warmup = std::min(p - r - 1, m);
    int next_f = 0, next_b = 0;
    while (next_f < warmup) ops.push_back({OpKind::F, next_f++, 0});
    while (next_f < m) {  // steady state: 1F, 1B
      ops.push_back({OpKind::F, next_f++, 0});
      ops.push_back({OpKind::BW, next_b++, 0});
    }
    while (next_b < m) ops.push_back({OpKind::BW, next_b++, 0});  // cool-down
  }
  return s;
}

/// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, §2.2;
/// forward_backward_pipelining_with_interleaving): each rank holds v model chunks, chunk c of
/// rank r being stage c·p + r, and every op costs 1/v of a whole rank's op.
///
/// Order. The micro-batches go in groups of p: a rank runs F of micro-batches 0 … p−1 on chunk
/// 0, then the same p on chunk 1, …, on chunk v−1, then the next group of p on chunk 0, … The
/// k-th forward (k = 0 … v·m − 1) is therefore micro-batch (k div (p·v))·p + k mod p on chunk
/// (k mod (p·v)) div p; the k-th backward is the same micro-batch on chunk v − 1 − that (the
/// gradients come back through the chunks in reverse). Warm-up on rank r:
/// 2(p − r − 1) + (v − 1)·p forwards, capped at v·m — all v·m when m = p, as Megatron-LM does
/// (it then runs every forward first); then 1F1B, then the cool-down.
///
/// Constraint (Megatron-LM's, `num_microbatches % pipeline_parallel_size == 0` "when using
/// interleaved schedule"): m must be a multiple of p, since micro-batches run in whole groups of
/// p per chunk. Newer Megatron-core relaxes this with microbatch_group_size_per_vp_stage; this
/// builder implements the classic schedule. With v = 1 there is nothing to interleave and
/// Megatron-LM runs the non-interleaved 1F1B: so does this builder (any m), under this name.
///
/// The ramp-up and ramp-down now take p − 1 chunk ops of 1/v the time: bubble (p − 1)/(v·m).
/// The price is memory: rank r holds up to min(2(p − r − 1) + (v − 1)·p + 1, v·m) chunk
/// activations (each 1/v of the rank's layers), about p(1 + (p − 1)/(p·v)) micro-batches'
/// worth on rank 0 instead of 1F1B's p.
inline Schedule interleaved_1f1b(int p, int m, int v) {
  detail::check_sizes("interleaved_1f1b", p, m, v);
  if (v > 1 && m % p != 0)
    throw PipelineError(detail::cat("pipeline::interleaved_1f1b: m = ", m,
                                    " micro-batches is not a multiple of p = ", p,
                                    " pipeline ranks (the interleaved schedule runs micro-batches in groups of p; v = ",
                                    v, ")"));
  if (v == 1) {
    Schedule s = one_f_one_b(p, m);
    s.name = "interleaved 1F1B";
    return s;
  }
  Schedule s{"interleaved 1F1B", p, m, v, std::vector<std::vector<Op>>(p)};
  const int total = v * m;  // chunk forwards per rank (and chunk backwards)
  const int group = p * v;  // one round: p micro-batches through each of the v chunks
  auto microbatch = [&](int k) { return (k / group) * p + k % p; };
  auto fwd_chunk = [&](int k) { return (k % group) / p; };
  auto bwd_chunk = [&](int k) { return v - 1 - (k % group) / p; };
  for (int r = 0; r < p; ++r) {
    auto& ops = s.ranks[r];
    const int warmup = (m == p) ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
    int kf = 0, kb = 0;
    while (kf < warmup) {
      ops.push_back({OpKind::F, microbatch(kf), fwd_chunk(kf)});
      ++kf;
    }
    while (kf < total) {  // steady state: 1F, 1B
      ops.push_back({OpKind::F, microbatch(kf), fwd_chunk(kf)});
      ++kf;
      ops.push_back({OpKind::BW, microbatch(kb), bwd_chunk(kb)});
      ++kb;
    }
    while (kb < total) {  // cool-down
      ops.push_back({OpKind::BW, microbatch(kb), bwd_chunk(kb)});
      ++kb;
    }
  }
  return s;
}

/// Zero-bubble ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §2.1, the
/// memory-efficient handcrafted schedule): the backward is split into B (input gradient) and W
/// (weight gradient).
///
/// Why it helps. A stage's B waits only for the next stage's B, not its W, so the gradient runs
/// back through the pipeline at t_B per stage instead of t_B + t_W; and W, which nobody waits
/// for, can be moved into the idle slots. Order on rank r: the 1F1B warm-up of
/// min(p − r − 1, m) forwards, then 1F1B with B in place of BW, where W(j) runs right after
/// B(j + r): rank r delays its weight gradients by r micro-batches, and its last r Ws fill the
/// cool-down (where 1F1B idles waiting for the later stages).
///
/// Memory: an activation lives until its W. Rank r holds its 1F1B count p − r plus the r
/// delayed Ws: min(p, m) on every rank, the peak of 1F1B's rank 0 — the paper's "same peak
/// memory as 1F1B" is the maximum over the ranks (rank r > 0 holds more than in 1F1B).
///
/// Bubble with t_F = t_B = t_W = 1 and m ≥ p: (p − 1) per rank, one slot per stage instead of
/// 1F1B's three, so (p − 1)/(3m) of the ideal 3m. For m < p the forwards cannot fill the time
/// until the first gradient comes back and the makespan is 2p + 2m − 1 (tests/pipeline checks
/// both).
inline Schedule zb_h1(int p, int m) {
  detail::check_sizes("zb_h1", p, m, 1);
  Schedule s{"ZB-H1", p, m, 1, std::vector<std::vector<Op>>(p)};
  for (int r = 0; r < p; ++r) {
    auto& ops = s.ranks[r];
    const int warmup = std::min(p - r - 1, m);
    int next_f = 0, next_b = 0, next_w = 0;
    // B(j), then the W that is due after it: W(j − r).
    auto backward = [&] {
      ops.push_back({OpKind::B, next_b++, 0});
      if (next_b - 1 - r >= 0) ops.push_back({OpKind::W, next_w++, 0});
    };
    while (next_f < warmup) ops.push_back({OpKind::F, next_f++, 0});
    while (next_f < m) {  // steady state: 1F, 1B (+ a delayed W)
      ops.push_back({OpKind::F, next_f++, 0});
      backward();
    }
    while (next_b < m) backward();                                // cool-down
    while (next_w < m) ops.push_back({OpKind::W, next_w++, 0});   // the r delayed Ws
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Validity
// ---------------------------------------------------------------------------------------------

/// What is wrong with a schedule's op lists, or "" when nothing is: p, m, v ≥ 1, one list per
/// rank, every op's micro-batch in [0, m) and chunk in [0, v), and on every rank, for every
/// (micro-batch, chunk), exactly one F and a backward that is either one BW or one B and one W.
/// Order is not checked here: an op before what it depends on is a deadlock, which the simulator
/// reports with each rank's blocked op.
inline std::string validity_problem(const Schedule& s) {
  using detail::cat;
  const std::string who = cat("pipeline schedule '", s.name, "'");
  if (s.p < 1 || s.m < 1 || s.v < 1)
    return cat(who, ": p = ", s.p, ", m = ", s.m, ", v = ", s.v, "; each must be >= 1");
  if (static_cast<int>(s.ranks.size()) != s.p)
    return cat(who, ": ", s.ranks.size(), " op lists for p = ", s.p, " ranks");
  if (std::int64_t{s.p} * s.m * s.v > max_ops_per_kind)
    return cat(who, ": p·m·v = ", std::int64_t{s.p} * s.m * s.v, " is more than the limit of ", max_ops_per_kind);
  const int cells = s.m * s.v;
  for (int r = 0; r < s.p; ++r) {
    // count[kind][microbatch·v + chunk]
    std::vector<std::vector<int>> count(4, std::vector<int>(static_cast<std::size_t>(cells), 0));
    for (const Op& op : s.ranks[r]) {
      if (op.microbatch < 0 || op.microbatch >= s.m || op.chunk < 0 || op.chunk >= s.v)
        return cat(who, ": rank ", r, " has ", describe(op), " outside m = ", s.m, " micro-batches and v = ", s.v,
                   " chunks");
      ++count[static_cast<int>(op.kind)][static_cast<std::size_t>(op.microbatch * s.v + op.chunk)];
    }
    for (int j = 0; j < s.m; ++j)
      for (int c = 0; c < s.v; ++c) {
        const auto i = static_cast<std::size_t>(j * s.v + c);
        const int f = count[0][i], b = count[1][i], w = count[2][i], bw = count[3][i];
        const std::string cell = cat("micro-batch ", j, " chunk ", c);
        if (f != 1) return cat(who, ": rank ", r, " has ", f, " F of ", cell, "; need exactly 1");
        const bool fused = bw == 1 && b == 0 && w == 0;
        const bool split = bw == 0 && b == 1 && w == 1;
        if (!fused && !split)
          return cat(who, ": rank ", r, " has B ", b, ", W ", w, ", BW ", bw, " of ", cell,
                     "; need one BW, or one B and one W");
      }
  }
  return "";
}

/// Throws PipelineError with validity_problem's text when the schedule is not valid.
inline void check_valid(const Schedule& s) {
  if (std::string problem = validity_problem(s); !problem.empty()) throw PipelineError(problem);
}

inline bool is_valid(const Schedule& s) { return validity_problem(s).empty(); }

}  // namespace shardalg::pipeline
