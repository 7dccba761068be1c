// shardalg/pipeline/simulate.hpp — run a schedule on paper: when does each op start and end,
// how long does each rank idle, how many activations does it hold.
//
// The model. Rank r runs its list in order, one op at a time, starting at time 0. An op starts
// when the rank is free and the ops it depends on have ended (point-to-point latency 0):
//
//   F(j) on stage s    after F(j) on stage s − 1                        (its input activation)
//   B(j) on stage s    after F(j) on stage s, and after the backward     (its own activation, and
//                      (B or BW) of j on stage s + 1                      the output gradient)
//   BW(j) on stage s   the same as B
//   W(j) on stage s    after B(j) on stage s                             (the weight gradient
//                                                                         needs dL/d(output))
//
// Costs: an op of rank r's chunk costs t_F, t_B, t_W (BW: t_B + t_W), divided by v: with v
// chunks per rank each chunk holds 1/v of the rank's layers. Every rank therefore does the same
// work, m·(t_F + t_B + t_W), whatever the schedule.
//
// The bubble. Narayanan et al. 2021 measure the bubble against the ideal time, the work of one
// rank: bubble fraction = (makespan − ideal)/ideal with ideal = m·(t_F + t_B + t_W). (Bubble /
// total time, (makespan − ideal)/makespan, is the other convention; it is not used here.) With
// unit costs this is (p − 1)/m for AFAB and 1F1B, (p − 1)/(v·m) interleaved, (p − 1)/(3m) for
// ZB-H1 (schedule.hpp).
//
// Because each rank's order is fixed, the earliest start of every op follows from the order
// alone: the simulator repeatedly runs, on every rank, the next op whose dependencies have ended,
// until all ops have run. If no rank can run its next op while ops remain, the schedule
// deadlocks (an op placed before something it needs, on this rank or through a neighbour), and
// PipelineDeadlockError names every rank's blocked op and what it waits for.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shardalg/pipeline/errors.hpp"
#include "shardalg/pipeline/schedule.hpp"

namespace shardalg::pipeline {

/// The cost of one whole rank's forward (t_F), input gradient (t_B) and weight gradient (t_W)
/// for one micro-batch. A fused BW costs t_B + t_W; with v chunks each op costs 1/v of these.
struct Costs {
  double t_F = 1;
  double t_B = 1;
  double t_W = 1;
};

struct OpTime {
  double start = 0;
  double end = 0;
};

struct Simulation {
  std::vector<std::vector<OpTime>> times;  // times[r][i]: when schedule.ranks[r][i] runs
  double makespan = 0;                     // when the last op ends
  double ideal = 0;                        // one rank's work: m·(t_F + t_B + t_W)
  double bubble_fraction = 0;              // (makespan − ideal)/ideal
  std::vector<double> busy;                // per rank: the sum of its ops' costs (= ideal)
  std::vector<double> idle;                // per rank: makespan − busy
  std::vector<int> peak_in_flight;         // per rank: most activations held at once

  /// The largest of peak_in_flight: the schedule's activation memory, in activations.
  int max_in_flight() const {
    return peak_in_flight.empty() ? 0 : *std::max_element(peak_in_flight.begin(), peak_in_flight.end());
  }
};

/// The cost of one op under `costs` in a schedule with v chunks per rank.
inline double op_cost(OpKind kind, const Costs& costs, int v) {
  double t = 0;
  switch (kind) {
    case OpKind::F: t = costs.t_F; break;
    case OpKind::B: t = costs.t_B; break;
    case OpKind::W: t = costs.t_W; break;
    case OpKind::BW: t = costs.t_B + costs.t_W; break;
  }
  return t / v;
}

/// Activations held by one rank: an activation is taken by F(j, c) and held until W(j, c) or
/// BW(j, c) has run (a split backward still needs the layer inputs for the weight gradient).
/// The rank runs one op at a time, so the count follows the list order; its maximum is the
/// peak. Counted in chunk activations (1/v of the rank's layers each).
inline int peak_in_flight(const std::vector<Op>& ops) {
  int live = 0, peak = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::F) peak = std::max(peak, ++live);
    if (op.kind == OpKind::W || op.kind == OpKind::BW) --live;
  }
  return peak;
}

namespace detail {

/// End times per (micro-batch, stage); a negative value means "has not run yet". Only what
/// other ops wait for is kept: the forward, and the input gradient (from B or BW).
struct EndTimes {
  int stages = 0;
  std::vector<double> forward, input_grad;
  EndTimes(int m, int stages_)
      : stages(stages_), forward(static_cast<std::size_t>(m) * stages_, -1.0), input_grad(forward) {}
  double& f(int j, int s) { return forward[static_cast<std::size_t>(j) * stages + s]; }
  double& b(int j, int s) { return input_grad[static_cast<std::size_t>(j) * stages + s]; }
};

/// A dependency that has not run: `what` ("F", "B", "the backward") of a micro-batch on a stage.
struct Missing {
  std::string_view what;
  int microbatch = 0;
  int stage = 0;
};

/// When `op`, on stage `s`, may start as far as its dependencies go: the latest end among them
/// (0 when it has none), or −1 with `missing` set to the first one that has not run.
inline double ready_time(const Op& op, int s, int last_stage, EndTimes& end, Missing& missing) {
  const int j = op.microbatch;
  double t = 0;
  auto need = [&](double e, std::string_view what, int stage) {
    if (t < 0) return;
    if (e < 0) {
      t = -1;
      missing = {what, j, stage};
    } else {
      t = std::max(t, e);
    }
  };
  switch (op.kind) {
    case OpKind::F:
      if (s > 0) need(end.f(j, s - 1), "F", s - 1);
      break;
    case OpKind::B:
    case OpKind::BW:
      need(end.f(j, s), "F", s);
      if (s < last_stage) need(end.b(j, s + 1), "the backward", s + 1);
      break;
    case OpKind::W:
      need(end.b(j, s), "B", s);
      break;
  }
  return t;
}

inline void check_costs(const Costs& c) {
  auto bad = [](double t) { return !std::isfinite(t) || t < 0; };
  if (bad(c.t_F) || bad(c.t_B) || bad(c.t_W) || !(c.t_F + c.t_B + c.t_W > 0))
    throw PipelineError(cat("pipeline::simulate: costs t_F = ", c.t_F, ", t_B = ", c.t_B, ", t_W = ", c.t_W,
                            "; each must be finite and >= 0, and their sum > 0"));
}

}  // namespace detail

/// Runs `s` under `costs` (see the top of this file). Throws PipelineError when the schedule is
/// not valid (check_valid) or a cost is negative or not finite, PipelineDeadlockError when it
/// deadlocks.
inline Simulation simulate(const Schedule& s, const Costs& costs = {}) {
  check_valid(s);
  detail::check_costs(costs);
  const int p = s.p, last_stage = s.stages() - 1;
  detail::EndTimes end(s.m, s.stages());

  Simulation out;
  out.times.resize(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) out.times[r].resize(s.ranks[r].size());
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);  // index of each rank's next op
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0);   // when each rank is free
  std::size_t left = 0;
  for (const auto& ops : s.ranks) left += ops.size();
  const std::size_t total = left;

  while (left > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      // Run this rank's ops for as long as their dependencies have ended.
      while (next[r] < s.ranks[r].size()) {
        const Op& op = s.ranks[r][next[r]];
        const int stage = s.stage(r, op.chunk);
        detail::Missing unused;
        const double ready = detail::ready_time(op, stage, last_stage, end, unused);
        if (ready < 0) break;
        OpTime& t = out.times[r][next[r]];
        t.start = std::max(free_at[r], ready);
        t.end = t.start + op_cost(op.kind, costs, s.v);
        free_at[r] = t.end;
        if (op.kind == OpKind::F) end.f(op.microbatch, stage) = t.end;
        if (op.kind == OpKind::B || op.kind == OpKind::BW) end.b(op.microbatch, stage) = t.end;
        ++next[r];
        --left;
        progress = true;
      }
    }
    if (!progress) {  // nobody can move: name each rank's blocked op and what it waits for
      std::string msg = detail::cat("pipeline::simulate: deadlock in schedule '", s.name, "' (p = ", p, ", m = ", s.m,
                                    ", v = ", s.v, "), ", left, " of ", total, " ops not run:");
      for (int r = 0; r < p; ++r) {
        msg += detail::cat(r == 0 ? " " : "; ", "rank ", r);
        if (next[r] == s.ranks[r].size()) {
          msg += " done";
          continue;
        }
        const Op& op = s.ranks[r][next[r]];
        detail::Missing w;
        detail::ready_time(op, s.stage(r, op.chunk), last_stage, end, w);
        msg += detail::cat(" blocked at op ", next[r], " ", describe(op), ", waiting for ", w.what, " of micro-batch ",
                           w.microbatch, " on stage ", w.stage);
      }
      throw PipelineDeadlockError(msg);
    }
  }

  out.ideal = s.m * (costs.t_F + costs.t_B + costs.t_W);
  for (int r = 0; r < p; ++r) {
    double busy = 0;
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) busy += out.times[r][i].end - out.times[r][i].start;
    out.busy.push_back(busy);
    out.makespan = std::max(out.makespan, free_at[r]);
    out.peak_in_flight.push_back(peak_in_flight(s.ranks[r]));
  }
  for (int r = 0; r < p; ++r) out.idle.push_back(out.makespan - out.busy[r]);
  out.bubble_fraction = (out.makespan - out.ideal) / out.ideal;
  return out;
}

}  // namespace shardalg::pipeline
