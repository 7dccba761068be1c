// Pipeline schedules (shardalg/pipeline/schedule.hpp) run by the simulator (simulate.hpp).
//
// Every builder over p ∈ {1, 2, 3, 4, 8}, several m and v ∈ {1, 2, 3}:
//   - the schedule is valid (every (micro-batch, chunk) F once and its backward once per rank);
//   - the simulated times respect every dependency, no rank runs two ops at once, each op lasts
//     its cost and starts as early as its rank and its dependencies allow (checked here from the
//     times, not by the simulator's own logic);
//   - the bubble equals the closed form of the literature, exactly (1e-12);
//   - the activations held per rank equal the schedule's bound.
// Normalisation (Narayanan et al. 2021): bubble fraction = (makespan − ideal)/ideal, ideal =
// m·(t_F + t_B + t_W), the work of one rank. With t_F = t_B = t_W = 1:
//   AFAB and 1F1B (p − 1)/m,  interleaved (p − 1)/(v·m),  ZB-H1 (p − 1)/(3m) for m ≥ p.
// The expected values are written here from those formulas, never taken from the code under test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <shardalg/pipeline/schedule.hpp>
#include <shardalg/pipeline/simulate.hpp>

using namespace shardalg::pipeline;

// Print vectors of ints in failure messages ("{4, 3, 2, 1}" instead of "{?}").
namespace doctest {
template <>
struct StringMaker<std::vector<int>> {
  static String convert(const std::vector<int>& v) {
    std::string s = "{";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return (s + "}").c_str();
  }
};
}  // namespace doctest

namespace {

constexpr double tol = 1e-12;
const std::vector<int> ps = {1, 2, 3, 4, 8};
const std::vector<int> ms = {1, 2, 3, 4, 5, 8, 12, 16};
const std::vector<int> vs = {1, 2, 3};

/// The micro-batch counts the interleaved schedule accepts at p: multiples of p.
std::vector<int> interleaved_ms(int p) { return {p, 2 * p, 3 * p, 4 * p}; }

/// Checks the simulated times against the dependency rules, independently of the simulator:
/// every op lasts its cost, starts after the rank's previous op and after every op it depends
/// on, and at the earliest such time (the simulator inserts no idle time of its own).
void check_times(const Schedule& s, const Simulation& sim, const Costs& c) {
  // (kind, micro-batch, stage) -> end time; B and BW both deliver the input gradient.
  std::map<std::tuple<char, int, int>, double> end;
  for (int r = 0; r < s.p; ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      const int st = op.chunk * s.p + r;
      const double e = sim.times[r][i].end;
      if (op.kind == OpKind::F) end[{'F', op.microbatch, st}] = e;
      if (op.kind == OpKind::B || op.kind == OpKind::BW) end[{'B', op.microbatch, st}] = e;
    }
  const int last = s.v * s.p - 1;
  for (int r = 0; r < s.p; ++r) {
    double prev_end = 0;
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      const OpTime t = sim.times[r][i];
      const int st = op.chunk * s.p + r, j = op.microbatch;
      CAPTURE(s.name);
      CAPTURE(s.p);
      CAPTURE(s.m);
      CAPTURE(s.v);
      CAPTURE(r);
      CAPTURE(i);
      double cost = op.kind == OpKind::F    ? c.t_F
                    : op.kind == OpKind::B  ? c.t_B
                    : op.kind == OpKind::W  ? c.t_W
                                            : c.t_B + c.t_W;
      cost /= s.v;
      CHECK(std::abs((t.end - t.start) - cost) <= tol);
      std::vector<double> deps = {prev_end};
      if (op.kind == OpKind::F && st > 0) deps.push_back(end.at({'F', j, st - 1}));
      if (op.kind == OpKind::B || op.kind == OpKind::BW) {
        deps.push_back(end.at({'F', j, st}));
        if (st < last) deps.push_back(end.at({'B', j, st + 1}));
      }
      if (op.kind == OpKind::W) deps.push_back(end.at({'B', j, st}));
      const double earliest = *std::max_element(deps.begin(), deps.end());
      CHECK(t.start >= earliest);           // respects the rank's order and the dependencies
      CHECK(t.start <= earliest + tol);     // and idles no longer than it must
      prev_end = t.end;
    }
  }
}

/// Every schedule of the property tests, with the closed forms it must meet under unit costs.
struct Expected {
  Schedule s;
  double bubble;           // (makespan − ideal)/ideal
  std::vector<int> peak;   // activations held, per rank
};

std::vector<Expected> unit_cost_cases() {
  std::vector<Expected> out;
  for (int p : ps) {
    for (int m : ms) {
      // AFAB: the last rank starts p − 1 slots late and rank 0 ends p − 1 slots late: (p − 1)/m.
      out.push_back({afab(p, m), double(p - 1) / m, std::vector<int>(p, m)});
      // 1F1B: the same bubble; rank r holds min(p − r, m).
      std::vector<int> peak(p);
      for (int r = 0; r < p; ++r) peak[r] = std::min(p - r, m);
      out.push_back({one_f_one_b(p, m), double(p - 1) / m, peak});
      // ZB-H1: one idle unit per stage for m ≥ p: (p − 1)/(3m). For m < p rank 0 runs its m
      // forwards, waits until the first gradient is back (2p − 1: p forward and p − 1 backward
      // steps), then runs 2m ops back to back: makespan 2p + 2m − 1.
      const double makespan = m >= p ? 3.0 * m + (p - 1) : 2.0 * p + 2.0 * m - 1;
      out.push_back({zb_h1(p, m), (makespan - 3.0 * m) / (3.0 * m), std::vector<int>(p, std::min(p, m))});
      // Interleaved with v = 1 is 1F1B, for any m.
      out.push_back({interleaved_1f1b(p, m, 1), double(p - 1) / m, peak});
    }
    for (int m : interleaved_ms(p))
      for (int v : vs) {
        if (v == 1) continue;  // covered above
        // (p − 1) ramp slots of 1/v the time: (p − 1)/(v·m). Rank r holds its warm-up plus one:
        // 2(p − r − 1) + (v − 1)p + 1 chunk activations; all v·m when m = p (all warm-up).
        std::vector<int> peak_i(p);
        for (int r = 0; r < p; ++r) peak_i[r] = m == p ? v * m : 2 * (p - r - 1) + (v - 1) * p + 1;
        out.push_back({interleaved_1f1b(p, m, v), double(p - 1) / (v * m), peak_i});
      }
  }
  return out;
}

}  // namespace

TEST_CASE("pipeline: every schedule is valid, respects its dependencies, and meets its bubble and memory") {
  const auto cases = unit_cost_cases();
  CHECK(cases.size() == 5 * 8 * 4 + 5 * 4 * 2);
  for (const Expected& e : cases) {
    const Schedule& s = e.s;
    CAPTURE(s.name);
    CAPTURE(s.p);
    CAPTURE(s.m);
    CAPTURE(s.v);
    REQUIRE(validity_problem(s) == "");
    const Simulation sim = simulate(s);  // unit costs: t_F = t_B = t_W = 1
    check_times(s, sim, Costs{});
    // The normalisation: ideal = m·(t_F + t_B + t_W); bubble = (makespan − ideal)/ideal.
    CHECK(sim.ideal == 3.0 * s.m);
    CHECK(std::abs(sim.bubble_fraction - e.bubble) <= tol);
    CHECK(std::abs(sim.makespan - 3.0 * s.m * (1 + e.bubble)) <= tol * sim.makespan);
    // Every rank does the same work, so every rank idles the same time.
    for (int r = 0; r < s.p; ++r) {
      CHECK(std::abs(sim.busy[r] - sim.ideal) <= tol * sim.ideal);
      CHECK(std::abs(sim.idle[r] - 3.0 * s.m * e.bubble) <= tol * sim.makespan);
    }
    CHECK(sim.peak_in_flight == e.peak);
  }
}

TEST_CASE("pipeline: the bubble table at p = 4, m = 8 (unit costs, bubble / ideal)") {
  // The numbers of docs/pipeline.md: 3/8, 3/8, 3/16 (v = 2), 1/8 (v = 3), 1/8.
  CHECK(simulate(afab(4, 8)).bubble_fraction == doctest::Approx(3.0 / 8).epsilon(tol));
  CHECK(simulate(one_f_one_b(4, 8)).bubble_fraction == doctest::Approx(3.0 / 8).epsilon(tol));
  CHECK(simulate(interleaved_1f1b(4, 8, 2)).bubble_fraction == doctest::Approx(3.0 / 16).epsilon(tol));
  CHECK(simulate(interleaved_1f1b(4, 8, 3)).bubble_fraction == doctest::Approx(1.0 / 8).epsilon(tol));
  CHECK(simulate(zb_h1(4, 8)).bubble_fraction == doctest::Approx(1.0 / 8).epsilon(tol));
  // The makespans in time units: 3(m + p − 1) = 33, 33, 3m + 3(p − 1)/2 = 28.5, 3m + p − 1 = 27.
  CHECK(simulate(afab(4, 8)).makespan == 33);
  CHECK(simulate(one_f_one_b(4, 8)).makespan == 33);
  CHECK(simulate(interleaved_1f1b(4, 8, 2)).makespan == 28.5);
  CHECK(simulate(zb_h1(4, 8)).makespan == 27);
  // Memory: AFAB 8 on every rank, 1F1B 4 3 2 1, ZB-H1 4 on every rank (its maximum is 1F1B's),
  // interleaved v = 2: 2·(3 − r) + 4 + 1 chunk activations of half a stage each.
  CHECK(simulate(afab(4, 8)).peak_in_flight == std::vector<int>{8, 8, 8, 8});
  CHECK(simulate(one_f_one_b(4, 8)).peak_in_flight == std::vector<int>{4, 3, 2, 1});
  CHECK(simulate(zb_h1(4, 8)).peak_in_flight == std::vector<int>{4, 4, 4, 4});
  CHECK(simulate(zb_h1(4, 8)).max_in_flight() == simulate(one_f_one_b(4, 8)).max_in_flight());
  CHECK(simulate(interleaved_1f1b(4, 8, 2)).peak_in_flight == std::vector<int>{11, 9, 7, 5});
}

TEST_CASE("pipeline: unequal costs — the makespans of the literature") {
  // (t_F, t_B, t_W). AFAB and 1F1B: (m + p − 1)(t_F + t_B + t_W). Interleaved:
  // m·T + (p − 1)·T/v with T = t_F + t_B + t_W. ZB-H1 (Qi et al. 2024, for m ≥ p and t_W ≤ t_F):
  // m·T + (p − 1)(t_F + t_B − t_W).
  const std::vector<Costs> costs = {{1, 2, 1}, {2, 1, 1}, {2, 3, 1}, {3, 2, 2}, {1.5, 2.5, 0.5}};
  for (const Costs& c : costs) {
    const double T = c.t_F + c.t_B + c.t_W;
    for (int p : {2, 3, 4, 8})
      for (int m : {p, 2 * p, 3 * p}) {
        CAPTURE(c.t_F);
        CAPTURE(c.t_B);
        CAPTURE(c.t_W);
        CAPTURE(p);
        CAPTURE(m);
        for (const Schedule& s : {afab(p, m), one_f_one_b(p, m)}) {
          const Simulation sim = simulate(s, c);
          check_times(s, sim, c);
          CHECK(std::abs(sim.makespan - (m + p - 1) * T) <= tol * sim.makespan);
          CHECK(std::abs(sim.bubble_fraction - double(p - 1) / m) <= tol);
        }
        for (int v : {2, 3}) {
          const Schedule s = interleaved_1f1b(p, m, v);
          const Simulation sim = simulate(s, c);
          check_times(s, sim, c);
          CHECK(std::abs(sim.makespan - (m * T + (p - 1) * T / v)) <= tol * sim.makespan);
        }
        const Schedule z = zb_h1(p, m);
        const Simulation sim = simulate(z, c);
        check_times(z, sim, c);
        CHECK(std::abs(sim.makespan - (m * T + (p - 1) * (c.t_F + c.t_B - c.t_W))) <= tol * sim.makespan);
      }
  }
}

TEST_CASE("pipeline: the builders' orders, written out (p = 3, m = 4)") {
  // Rank 0 of 1F1B: warm-up min(p − 1, m) = 2 forwards, then F/BW pairs, then the cool-down.
  const Schedule s = one_f_one_b(3, 4);
  const std::vector<Op> rank0 = {{OpKind::F, 0, 0},  {OpKind::F, 1, 0},  {OpKind::F, 2, 0}, {OpKind::BW, 0, 0},
                                 {OpKind::F, 3, 0},  {OpKind::BW, 1, 0}, {OpKind::BW, 2, 0}, {OpKind::BW, 3, 0}};
  CHECK(s.ranks[0] == rank0);
  // ZB-H1 rank 1: W(j) right after B(j + 1); the last W after the last B.
  const Schedule z = zb_h1(3, 4);
  const std::vector<Op> zrank1 = {{OpKind::F, 0, 0}, {OpKind::F, 1, 0}, {OpKind::B, 0, 0}, {OpKind::F, 2, 0},
                                  {OpKind::B, 1, 0}, {OpKind::W, 0, 0}, {OpKind::F, 3, 0}, {OpKind::B, 2, 0},
                                  {OpKind::W, 1, 0}, {OpKind::B, 3, 0}, {OpKind::W, 2, 0}, {OpKind::W, 3, 0}};
  CHECK(z.ranks[1] == zrank1);
  // Interleaved p = 2, m = 4, v = 2, rank 1: warm-up 2·0 + 1·2 = 2 forwards; forwards go
  // mb 0, 1 on chunk 0, mb 0, 1 on chunk 1, mb 2, 3 on chunk 0, …; backwards chunk 1 first.
  const Schedule i = interleaved_1f1b(2, 4, 2);
  const std::vector<Op> irank1 = {{OpKind::F, 0, 0},  {OpKind::F, 1, 0},  {OpKind::F, 0, 1},  {OpKind::BW, 0, 1},
                                  {OpKind::F, 1, 1},  {OpKind::BW, 1, 1}, {OpKind::F, 2, 0},  {OpKind::BW, 0, 0},
                                  {OpKind::F, 3, 0},  {OpKind::BW, 1, 0}, {OpKind::F, 2, 1},  {OpKind::BW, 2, 1},
                                  {OpKind::F, 3, 1},  {OpKind::BW, 3, 1}, {OpKind::BW, 2, 0}, {OpKind::BW, 3, 0}};
  CHECK(i.ranks[1] == irank1);
  CHECK(i.stage(1, 1) == 3);
  CHECK(i.stages() == 4);
}

TEST_CASE("pipeline: bad arguments are PipelineError naming the values") {
  CHECK_THROWS_WITH_AS(afab(0, 4), "pipeline::afab: p = 0 pipeline ranks; need p >= 1", PipelineError);
  CHECK_THROWS_WITH_AS(one_f_one_b(4, 0), "pipeline::one_f_one_b: m = 0 micro-batches; need m >= 1", PipelineError);
  CHECK_THROWS_WITH_AS(zb_h1(-2, 3), "pipeline::zb_h1: p = -2 pipeline ranks; need p >= 1", PipelineError);
  CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 8, 0),
                       "pipeline::interleaved_1f1b: v = 0 model chunks per rank; need v >= 1", PipelineError);
  CHECK_THROWS_WITH_AS(interleaved_1f1b(4, 6, 2),
                       "pipeline::interleaved_1f1b: m = 6 micro-batches is not a multiple of p = 4 pipeline ranks "
                       "(the interleaved schedule runs micro-batches in groups of p; v = 2)",
                       PipelineError);
  CHECK_NOTHROW(interleaved_1f1b(4, 6, 1));  // v = 1 is plain 1F1B: any m
  CHECK_THROWS_WITH_AS(one_f_one_b(1000, 100000),
                       "pipeline::one_f_one_b: p·m·v = 1000·100000·1 = 100000000 is more than the limit of 10000000",
                       PipelineError);
  CHECK_THROWS_WITH_AS(simulate(afab(2, 2), Costs{-1, 1, 1}),
                       "pipeline::simulate: costs t_F = -1, t_B = 1, t_W = 1; each must be finite and >= 0, "
                       "and their sum > 0",
                       PipelineError);
  CHECK_THROWS_WITH_AS(simulate(afab(2, 2), Costs{0, 0, 0}),
                       "pipeline::simulate: costs t_F = 0, t_B = 0, t_W = 0; each must be finite and >= 0, "
                       "and their sum > 0",
                       PipelineError);
  // Every one is a shardalg::Error.
  CHECK_THROWS_AS(afab(1, 0), shardalg::Error);
}

TEST_CASE("pipeline: the validity check names the first problem") {
  Schedule s = one_f_one_b(2, 2);
  CHECK(is_valid(s));
  // A missing backward.
  Schedule missing = s;
  missing.ranks[1].pop_back();
  CHECK(validity_problem(missing) ==
        "pipeline schedule '1F1B': rank 1 has B 0, W 0, BW 0 of micro-batch 1 chunk 0; need one BW, or one B and one W");
  CHECK_THROWS_WITH_AS(simulate(missing),
                       "pipeline schedule '1F1B': rank 1 has B 0, W 0, BW 0 of micro-batch 1 chunk 0; need one BW, "
                       "or one B and one W",
                       PipelineError);
  // A forward run twice.
  Schedule twice = s;
  twice.ranks[0].push_back({OpKind::F, 0, 0});
  CHECK(validity_problem(twice) == "pipeline schedule '1F1B': rank 0 has 2 F of micro-batch 0 chunk 0; need exactly 1");
  // A split backward with its W missing.
  Schedule no_w = zb_h1(2, 2);
  no_w.ranks[0].pop_back();
  CHECK(validity_problem(no_w) ==
        "pipeline schedule 'ZB-H1': rank 0 has B 1, W 0, BW 0 of micro-batch 1 chunk 0; need one BW, or one B and one W");
  // An op outside the schedule's micro-batches or chunks.
  Schedule outside = s;
  outside.ranks[0][0].chunk = 1;
  CHECK(validity_problem(outside) ==
        "pipeline schedule '1F1B': rank 0 has F(mb 0, chunk 1) outside m = 2 micro-batches and v = 1 chunks");
  // A list missing for a rank.
  Schedule short_of_ranks = s;
  short_of_ranks.ranks.pop_back();
  CHECK(validity_problem(short_of_ranks) == "pipeline schedule '1F1B': 1 op lists for p = 2 ranks");
}

TEST_CASE("pipeline: a deadlock is PipelineDeadlockError naming each rank's blocked op") {
  // 1F1B, p = 2, m = 2. Rank 1 (the last stage) is F0 BW0 F1 BW1; swap its first two ops, so
  // that it wants the gradient of micro-batch 0 before running its forward.
  Schedule s = one_f_one_b(2, 2);
  std::swap(s.ranks[1][0], s.ranks[1][1]);
  CHECK(is_valid(s));  // the counts are right: only the order is wrong
  CHECK_THROWS_WITH_AS(simulate(s),
                       "pipeline::simulate: deadlock in schedule '1F1B' (p = 2, m = 2, v = 1), 6 of 8 ops not run: "
                       "rank 0 blocked at op 2 BW(mb 0, chunk 0), waiting for the backward of micro-batch 0 on stage "
                       "1; rank 1 blocked at op 0 BW(mb 0, chunk 0), waiting for F of micro-batch 0 on stage 1",
                       PipelineDeadlockError);
  // A W before its B on one rank: the rank waits for itself.
  Schedule z = zb_h1(2, 3);
  auto& ops = z.ranks[0];
  const auto b0 = std::find(ops.begin(), ops.end(), Op{OpKind::B, 0, 0});
  const auto w0 = std::find(ops.begin(), ops.end(), Op{OpKind::W, 0, 0});
  std::iter_swap(b0, w0);
  CHECK_THROWS_AS(simulate(z), PipelineDeadlockError);
  // For every builder, swapping the last rank's first F with its first backward deadlocks (that
  // backward needs that forward).
  for (const Schedule& t : {afab(3, 4), one_f_one_b(3, 4), interleaved_1f1b(3, 6, 2), zb_h1(3, 4)}) {
    CAPTURE(t.name);
    Schedule u = t;
    auto first_back = std::find_if(u.ranks[2].begin(), u.ranks[2].end(),
                                   [](const Op& op) { return op.kind != OpKind::F; });
    std::iter_swap(u.ranks[2].begin(), first_back);
    CHECK_THROWS_AS(simulate(u), PipelineDeadlockError);
  }
}

TEST_CASE("pipeline: p = 1 has no bubble; m = 1 is a single pass down and back") {
  for (int m : ms) {
    CHECK(simulate(afab(1, m)).bubble_fraction == 0);
    CHECK(simulate(one_f_one_b(1, m)).bubble_fraction == 0);
    CHECK(simulate(zb_h1(1, m)).bubble_fraction == 0);
    for (int v : vs) CHECK(std::abs(simulate(interleaved_1f1b(1, m, v)).bubble_fraction) <= tol);  // sums of 1/3
  }
  for (int p : ps) {
    // One micro-batch: p forwards, then p backwards (B + W fused: 2 each) = 3p; ZB-H1: p
    // forwards, p input gradients, then rank 0's W: 2p + 1.
    CHECK(simulate(one_f_one_b(p, 1)).makespan == 3 * p);
    CHECK(simulate(zb_h1(p, 1)).makespan == 2 * p + 1);
  }
}
