// Pipeline execution (issue 16) on ThreadComm meshes: point to point of Sharded activations on
// the pp axis (R, Row, C kept across the send; the shape messages of variable lengths; the ring
// exchange), and nn::PipelineGpt run by pipeline::Executor on dp × pp × tp = 2 × {1, 2, 4} × 2
// for AFAB, 1F1B, interleaved 1F1B and ZB-H1, with and without output deallocation and variable
// sequence lengths, against the dense model (reference/dense_layers.hpp) and nn::Gpt at TP = 1 on the
// whole batch; the loss scaling; the bytes held with and without deallocation, op by op; the
// ledger's point-to-point entries; the errors.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pipeline_cases.hpp"
#include "shardalg/comm/sim_world.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace pc = pcases;
using M = Eigen::MatrixXd;
// (worst_error results are not unpacked with structured bindings: CAPTURE captures in a lambda, Clang 14)

namespace {

/// Run `s` on threads: every rank's output, by world rank.
std::vector<pc::RankOut> run_world(const pc::Setup& s, const nn::GptConfig& c, const nn::Masters& m, const pc::Batch& b) {
  const int world = s.dp * s.pp * s.cp * s.tp;
  std::vector<pc::RankOut> out(static_cast<std::size_t>(world));
  run_ranks(world, [&](ThreadComm& comm) {
    Mesh mesh = s.cp > 1 ? Mesh(Group(comm), {{"dp", s.dp}, {"pp", s.pp}, {"cp", s.cp}, {"tp", s.tp}})
                         : Mesh(Group(comm), {{"dp", s.dp}, {"pp", s.pp}, {"tp", s.tp}});
    out[static_cast<std::size_t>(comm.rank())] = pc::run_rank(s, c, m, b, mesh);
  });
  return out;
}

/// The gradients of replica d, cp rank c: every pp stage's tensors (tp rank 0's copy; all tp ranks
/// gathered the same), merged.
nn::Masters merge(const pc::Setup& s, const std::vector<pc::RankOut>& out, int d, int c = 0) {
  nn::Masters all;
  for (int r = 0; r < s.pp; ++r)
    for (const auto& [name, x] : out[static_cast<std::size_t>(((d * s.pp + r) * s.cp + c) * s.tp)].grads) all[name] = x;
  return all;
}

/// Run `s` on threads (masters and batch from the seeds) against the dense model: every rank's loss
/// and replica 0's merged gradients ≤ 1e-12. Returns every rank's output for further checks.
std::vector<pc::RankOut> check_dense(const pc::Setup& s, std::uint64_t masters_seed, std::uint64_t batch_seed) {
  const auto c = pc::config(s);
  const auto m = pc::masters(c, masters_seed);
  const auto b = pc::batch(s, c, batch_seed);
  const auto want = pc::dense(s, c, m, b, c.seed ^ 0x9E3779B97F4A7C15ULL);
  auto out = run_world(s, c, m, b);
  for (const auto& o : out) CHECK(std::abs(o.loss - want.loss) <= 1e-12 * std::abs(want.loss));
  const auto worst = pc::worst_error(merge(s, out, 0), want.grads);
  const double err = worst.first;
  const std::string at = worst.second;
  CAPTURE(at);
  CHECK(err <= 1e-12);
  return out;
}

}  // namespace

TEST_CASE("p2p: X[R], X[Row], X[C] keep their layout across the pp send; shapes only with variable lengths") {
  const Index rows = 12, cols = 8;
  for (bool variable : {false, true}) {
    CAPTURE(variable);
    std::vector<std::string> errors(4, "unset");
    std::vector<std::size_t> shape_msgs(4, 0), block_msgs(4, 0), block_bytes(4, 0);
    std::vector<int> peers(4, -2);
    run_ranks(4, [&](ThreadComm& comm) {
      Ledger ledger;
      Mesh mesh(ledgered(comm, ledger), {{"pp", 2}, {"tp", 2}});
      Group pp = mesh.group("pp"), tp = mesh.group("tp");
      pipeline::P2POptions o;
      o.variable_seq_lengths = variable;
      const M dense = M::NullaryExpr(rows, cols, [](Index i, Index j) { return 100.0 * i + j; });
      const pipeline::ActShape shape{4, 3, cols};  // 12 rows
      std::string err = "ok";
      auto check = [&](const auto& got, const char* what) {
        if (compare(got, dense).max_abs != 0.0) err = what;
      };
      if (pp.rank() == 0) {
        pipeline::send(pp, shard<Replicated>(dense, tp), 1, shape, o);
        pipeline::send(pp, shard<RowSharded>(dense, tp), 1, shape, o);
        pipeline::send(pp, shard<ColSharded>(dense, tp), 1, shape, o);
      } else {
        check(pipeline::recv<double, Replicated>(pp, tp, 0, shape, o), "R");
        check(pipeline::recv<double, RowSharded>(pp, tp, 0, variable ? std::nullopt : std::optional(shape), o), "Row");
        check(pipeline::recv<double, ColSharded>(pp, tp, 0, shape, o), "C");
      }
      const auto r = static_cast<std::size_t>(comm.rank());
      errors[r] = err;
      for (const auto& e : ledger.entries()) {
        if (e.axis != "pp") continue;
        if (e.scope == "shape") ++shape_msgs[r];
        else ++block_msgs[r], block_bytes[r] += e.bytes;
        peers[r] = e.peer;
      }
    });
    for (std::size_t r = 0; r < 4; ++r) {
      CHECK(errors[r] == "ok");
      CHECK(shape_msgs[r] == (variable ? 3u : 0u));  // 3 i64 per message, only with variable lengths
      CHECK(block_msgs[r] == 3u);
      // R: the whole 12x8; Row: 6x8; C: 12x4 (each tp rank its own block), doubles.
      CHECK(block_bytes[r] == (96u + 48u + 48u) * 8u);
      CHECK(peers[r] == (r < 2 ? 1 : 0));  // pp coordinate 0 sends to 1, 1 receives from 0
    }
  }
}

TEST_CASE("p2p: communicate() batched and ring exchange move the same tensors, prev and next at once") {
  for (bool ring : {false, true}) {
    for (bool variable : {false, true}) {
      CAPTURE(ring);
      CAPTURE(variable);
      std::vector<int> wrong(3, -1);
      run_ranks(3, [&](ThreadComm& comm) {
        Group pp = comm, tp = SelfComm{};
        pipeline::P2POptions o{variable, ring};
        const int r = pp.rank();
        const pipeline::ActShape shape{2, 2, 3};
        auto mk = [](int who, int dir) { return M::Constant(4, 3, 10.0 * who + dir); };
        auto a = shard<Replicated>(mk(r, 1), tp), b = shard<Replicated>(mk(r, 2), tp);
        auto got = pipeline::communicate(pp, tp, &a, &b, true, true, shape, o, /*wrap=*/true);
        int w = 0;
        w += compare(*got.from_prev, mk((r + 2) % 3, 2)).max_abs != 0.0;  // prev sent "to next" = dir 2
        w += compare(*got.from_next, mk((r + 1) % 3, 1)).max_abs != 0.0;
        wrong[static_cast<std::size_t>(r)] = w;
      });
      CHECK(wrong == std::vector<int>{0, 0, 0});
    }
  }
  // Without wrap the ends have no neighbour on one side.
  CHECK_THROWS_WITH_AS(run_ranks(2,
                                 [](ThreadComm& comm) {
                                   Group pp = comm, tp = SelfComm{};
                                   auto x = shard<Replicated>(M::Zero(2, 2), tp);
                                   if (pp.rank() == 0) (void)pipeline::communicate(pp, tp, &x, static_cast<const decltype(x)*>(nullptr), false, false, {1, 2, 2}, {});
                                 }),
                       "pipeline p2p: pp rank 0 of 2 has no previous stage", pipeline::PipelineError);
}

TEST_CASE("DP × PP × TP equals the dense model: every schedule, ± deallocation, ± variable lengths") {
  const std::vector<std::string> schedules = {"AFAB", "1F1B", "interleaved", "ZB-H1"};
  int runs = 0;
  for (int pp : {1, 2, 4}) {
    for (std::size_t k = 0; k < schedules.size(); ++k) {
      for (bool dealloc : {false, true}) {
        for (bool varlen : {false, true}) {
          pc::Setup s;
          s.dp = 2, s.pp = pp, s.tp = 2, s.schedule = schedules[k], s.m = 4;
          s.dealloc = dealloc, s.varlen = varlen;
          s.sp = dealloc;                            // each schedule and pp: sequence parallel and not
          s.overlap = varlen != (k % 2 == 1);        // and overlapped p2p and not
          CAPTURE(s.name());
          const auto c = pc::config(s);
          const auto m = pc::masters(c, 7 + static_cast<std::uint64_t>(pp));
          const auto b = pc::batch(s, c, 100 + static_cast<std::uint64_t>(pp) + k);
          const auto want = pc::dense(s, c, m, b, c.seed ^ 0x9E3779B97F4A7C15ULL);
          const auto out = run_world(s, c, m, b);
          for (const auto& o : out) CHECK(std::abs(o.loss - want.loss) <= 1e-12 * std::abs(want.loss));
          const auto got = merge(s, out, 0);
          const auto worst = pc::worst_error(got, want.grads);
          const double err = worst.first;
          const std::string at = worst.second;
          CAPTURE(at);
          CHECK(err <= 1e-12);
          CHECK(merge(s, out, 1) == got);  // the replicas hold the same reduced gradients
          // The tied embedding: the last stage's copy got the same whole gradient.
          if (pp > 1) {
            const auto& last = out[static_cast<std::size_t>((s.pp - 1) * s.tp)];
            CHECK(last.grads.count("embedding") == 0);  // reported by the first stage only …
          }
          ++runs;
        }
      }
    }
  }
  CHECK(runs == 48);
}

TEST_CASE("PP × TP 3 on shapes that do not divide: SP's 8 tokens as 3, 3, 2 cross each stage; vocabulary 37 unpadded") {
  for (const std::string& schedule : {std::string("1F1B"), std::string("ZB-H1")}) {
    pc::Setup s;
    s.dp = 1, s.pp = 2, s.tp = 3, s.schedule = schedule, s.m = 4, s.sp = true, s.heads = 6, s.vocab_divisor = 0;
    CAPTURE(s.name());
    (void)check_dense(s, 17, 170);  // ffn 32 on 3 ranks: 11, 11, 10
  }
}

TEST_CASE("DP × PP × CP × TP equals the dense model: ring and all-to-all, every schedule, ± SP") {
  // X[cp:Row] crosses the stages; each block's attention runs over cp; the gradients (G[cp:Partial])
  // and the loss are reduced over dp × cp. 8 threads per run.
  struct Run {
    int dp, pp, cp, tp;
    const char* schedule;
    bool a2a, sp, dealloc;
  };
  const std::vector<Run> runs = {
      {1, 2, 2, 2, "1F1B", false, false, false},        {1, 2, 2, 2, "ZB-H1", true, true, true},
      {2, 2, 2, 1, "interleaved", false, false, true}, {2, 2, 2, 1, "AFAB", true, false, false},
      {1, 2, 4, 1, "ZB-H1", false, false, false},
  };
  for (const auto& r : runs) {
    pc::Setup s;
    s.dp = r.dp, s.pp = r.pp, s.cp = r.cp, s.tp = r.tp, s.schedule = r.schedule, s.m = 4;
    s.a2a = r.a2a, s.sp = r.sp, s.dealloc = r.dealloc, s.overlap = r.dealloc;
    CAPTURE(s.name());
    const auto out = check_dense(s, 31, 131);
    const auto got = merge(s, out, 0);
    for (int d = 0; d < s.dp; ++d)
      for (int k = 0; k < s.cp; ++k) CHECK(merge(s, out, d, k) == got);  // every replica and cp rank: the same gradients
  }
}

TEST_CASE("activation recomputation in the pipeline: selective and full, fused backward and zero-bubble B/W, ± cp") {
  // Full recomputation: B restores the block's caches from its kept input before the input
  // gradient, and W reads the restored caches; under cp the recomputed forward runs the ring again.
  struct Run {
    int cp;
    const char* schedule;
    nn::Recompute r;
    bool sp;
  };
  const std::vector<Run> runs = {{1, "1F1B", nn::Recompute::full, false},
                                 {1, "ZB-H1", nn::Recompute::full, true},
                                 {1, "ZB-H1", nn::Recompute::selective, false},
                                 {2, "ZB-H1", nn::Recompute::full, false}};
  for (const auto& r : runs) {
    pc::Setup s;
    s.pp = 2, s.cp = r.cp, s.tp = 2, s.schedule = r.schedule, s.m = 4, s.recompute = r.r, s.sp = r.sp;
    CAPTURE(s.name());
    CAPTURE(static_cast<int>(r.r));
    check_dense(s, 41, 141);
  }
}

TEST_CASE("DP × PP × CP: per-micro-batch loss scaling divides by the micro-batch's count over whole sequences") {
  // An ignored target in one cp rank's chunk: that rank counts 3 of its 4 targets, the micro-batch 7
  // of 8. Dividing by the local count instead would weigh that chunk's tokens by 1/3, not 1/7.
  pc::Setup s;
  s.dp = 2, s.pp = 2, s.cp = 2, s.tp = 1, s.schedule = "1F1B", s.m = 4, s.dropout = 0.0;
  s.ignored = 3;
  s.scaling = nn::LossScaling::microbatches;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 9);
  const auto b = pc::batch(s, c, 19);
  const auto per_mb = pc::dense_per_microbatch(s, c, m, b);
  const double mean_of_means = per_mb.loss;
  const nn::Masters& avg = per_mb.grads;
  const auto out = run_world(s, c, m, b);
  CHECK(std::abs(out[0].loss - mean_of_means) <= 1e-12 * mean_of_means);
  const auto worst = pc::worst_error(merge(s, out, 0), avg);
  const double err = worst.first;
  const std::string at = worst.second;
  CAPTURE(at);
  CHECK(err <= 1e-12);
}

TEST_CASE("DP × PP × CP: sequences that do not split into 2·cp chunks are refused by name") {
  pc::Setup s;
  s.pp = 2, s.cp = 2, s.tp = 1, s.m = 2, s.dropout = 0.0;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 3);
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh mesh(Group(comm), {{"pp", 2}, {"cp", 2}, {"tp", 1}});
    auto model = nn::PipelineGpt<double>::init(c, pipeline::parse_layout(pc::layout(s), 2, c.layers), mesh, &m);
    nn::MicroBatch mb;
    mb.seq = 6, mb.sequences = 1, mb.tokens.assign(6, 1), mb.targets.assign(6, 2);
    CHECK_THROWS_WITH_AS(model.set_microbatches({mb}, nn::LossScaling::tokens, 6),
                         "PipelineGpt: micro-batch 0 has sequences of 6, not divisible by 2·cp = 4 (context parallelism: two chunks per rank)",
                         DivisibilityError);
    nn::GptConfig bad = c;
    bad.seq = 6;
    CHECK_THROWS_WITH_AS(nn::PipelineGpt<double>::init(bad, pipeline::parse_layout(pc::layout(s), 2, c.layers), mesh, &m),
                         "context parallelism: sequence length 6 is not divisible by 2·cp = 4 (two chunks per rank, for the causal balance)",
                         DivisibilityError);
  });
}

TEST_CASE("the simulated CUDA world's protocol (host memory) runs the pipeline too: isend/irecv, splits") {
  pc::Setup s;
  s.dp = 1, s.pp = 2, s.tp = 2, s.schedule = "interleaved", s.m = 4, s.varlen = true, s.overlap = true, s.sp = true;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 12);
  const auto b = pc::batch(s, c, 21);
  const auto want = pc::dense(s, c, m, b, c.seed ^ 0x9E3779B97F4A7C15ULL);
  std::vector<pc::RankOut> out(4);
  cuda::run_host_sim_ranks(4, [&](cuda::SimComm<cuda::HostSimOps>& comm) {
    Mesh mesh(Group(comm), {{"dp", 1}, {"pp", 2}, {"tp", 2}});
    out[static_cast<std::size_t>(comm.rank())] = pc::run_rank(s, c, m, b, mesh);
  });
  CHECK(std::abs(out[0].loss - want.loss) <= 1e-12 * want.loss);
  const auto worst = pc::worst_error(merge(s, out, 0), want.grads);
  const double err = worst.first;
  const std::string at = worst.second;
  CAPTURE(at);
  CHECK(err <= 1e-12);
}

TEST_CASE("nn::Gpt at TP = 1 on the whole batch gives the pipeline's loss and gradients") {
  pc::Setup s;
  s.dp = 2, s.pp = 4, s.tp = 2, s.schedule = "ZB-H1", s.m = 4, s.sp = true, s.overlap = true;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 5);
  const auto b = pc::batch(s, c, 55);
  nn::GptConfig plain = c;
  plain.sp = false;
  auto gpt = nn::Gpt<double>::from_masters(plain, m, Group(SelfComm{}));
  const double loss = gpt.forward_backward(b.tokens, b.targets);
  const auto want = gpt.grad_masters();
  const auto out = run_world(s, c, m, b);
  CHECK(std::abs(out[0].loss - loss) <= 1e-12 * loss);
  const auto worst = pc::worst_error(merge(s, out, 0), want);
  const double err = worst.first;
  const std::string at = worst.second;
  CAPTURE(at);
  CHECK(err <= 1e-12);
}

TEST_CASE("pipeline training: Adam, ZeRO-1 (the distributed optimizer) and ZeRO-3 follow one rank's curve (5 steps, <= 1e-12); the bytes and collectives of each") {
  struct Case {
    pc::Setup s;
    int zero;
  };
  std::vector<Case> cases;
  auto add = [&](int dp, int pp, int tp, const char* sched, bool sp, int zero) {
    pc::Setup s;
    s.dp = dp, s.pp = pp, s.tp = tp, s.schedule = sched, s.sp = sp, s.m = 4;
    cases.push_back({s, zero});
  };
  add(1, 2, 2, "1F1B", false, 0);        // Adam across stages: the norm over pp
  add(2, 2, 1, "1F1B", false, 1);        // ZeRO-1 over dp
  add(2, 2, 1, "1F1B", false, 3);        // ZeRO-3: the same buckets, so ZeRO-1's bits
  add(2, 2, 2, "ZB-H1", true, 1);        // ZeRO-1 with SP and the zero-bubble split
  add(2, 1, 2, "interleaved", false, 3); // E and L on one rank: the tied copies stay one
  std::map<std::string, std::vector<double>> by_setup;  // (setup, zero) → rank 0's curve
  for (const auto& [s, zero] : cases) {
    CAPTURE(s.name());
    CAPTURE(zero);
    const auto c = pc::config(s);
    const auto m = pc::masters(c, 17);
    const auto ref = pc::train_reference(s, c, m, 5);
    const int world = s.dp * s.pp * s.tp;
    const auto W = static_cast<std::size_t>(world);
    std::vector<std::vector<double>> curves(W);
    std::vector<std::size_t> state(W), padded(W), buckets(W), held(W), peak(W), whole(W), biggest(W);
    std::vector<std::map<std::string, std::size_t>> count(W);
    run_ranks(world, [&](ThreadComm& comm) {
      Ledger led;
      Mesh mesh(ledgered(Group(comm), led), {{"dp", s.dp}, {"pp", s.pp}, {"tp", s.tp}});
      const auto r = static_cast<std::size_t>(comm.rank());
      auto figures = [&](auto& keep) {
        buckets[r] = keep->plan().buckets();
        for (Index n : keep->plan().padded) {
          padded[r] += static_cast<std::size_t>(n);
          biggest[r] = std::max(biggest[r], static_cast<std::size_t>(n) * sizeof(double));
        }
        for (Index n : keep->plan().elements) whole[r] += static_cast<std::size_t>(n) * sizeof(double);
        held[r] = keep->parameter_bytes();
        peak[r] = keep->parameter_peak_bytes();
      };
      if (s.sp) {
        std::optional<nn::PipelineGpt<double, true>> keep;
        curves[r] = pc::train_rank<true>(s, c, m, mesh, 5, zero, 4096, &state[r], &keep);
        if (zero) figures(keep);
      } else {
        std::optional<nn::PipelineGpt<double, false>> keep;
        curves[r] = pc::train_rank<false>(s, c, m, mesh, 5, zero, 4096, &state[r], &keep);
        if (zero) figures(keep);
      }
      for (const auto& e : led.select())
        if (e.axis == "dp") ++count[r][std::string(to_string(e.kind)) + "@" + e.scope.substr(e.scope.rfind('/') + 1)];
    });
    for (std::size_t r = 0; r < W; ++r) {
      CAPTURE(r);
      REQUIRE(curves[r].size() == 5);
      CHECK(gt::curve_diff(curves[r], ref) <= 1e-12);
      if (!zero) continue;
      const std::size_t slices = sizeof(double) * padded[r] / static_cast<std::size_t>(s.dp);
      CHECK(state[r] == 2 * slices);  // Adam's two moments of this rank's Σ⌈n_b/dp⌉ values
      CHECK(count[r]["reduce_scatter@dp.grads"] == 5 * buckets[r]);  // in the step, one per bucket
      CHECK(count[r]["all_gather@dp.params"] == 5 * buckets[r]);      // ZeRO-1: after the update; ZeRO-3: the first forward
      CHECK(count[r]["all_reduce@dp.grads"] == 0);                    // finish() left the summands
      if (zero == 3) {
        CHECK(held[r] == slices);                   // between steps: the slices alone
        CHECK(peak[r] >= slices + whole[r]);        // during a run: the stage's parameters whole
        CHECK(peak[r] <= slices + whole[r] + biggest[r]);  // … and one bucket in flight
      } else {
        CHECK(held[r] >= whole[r]);  // ZeRO-1: the stage's parameters whole
      }
    }
    if (s.dp == 2 && s.pp == 2 && s.tp == 1) by_setup[std::to_string(zero)] = curves[0];
    CHECK(ref.back() < ref.front());
  }
  REQUIRE(by_setup.size() == 2);
  CHECK(by_setup["3"] == by_setup["1"]);  // bitwise: the same buckets, reductions and updates
}

TEST_CASE("pipeline training: bad calls are errors naming the values") {
  pc::Setup s;
  s.dp = 1, s.pp = 2, s.tp = 1;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 3);
  run_ranks(2, [&](ThreadComm& comm) {
    Mesh mesh(Group(comm), {{"dp", 1}, {"pp", 2}, {"tp", 1}});
    auto model = nn::PipelineGpt<double, false>::init(c, pipeline::parse_layout(pc::layout(s), 2, c.layers), mesh, &m);
    nn::Adam<double> adam;
    nn::ShardedAdam<double> zero;
    CHECK_THROWS_WITH_AS(model.step(adam), "PipelineGpt::step: no gradients; run the schedule and finish() first", ShapeError);
    CHECK_THROWS_WITH_AS(model.step(zero),
                         "PipelineGpt: step(ShardedAdam) needs shard_optimizer_state() before the run (finish() all-reduced "
                         "the gradients over the data group)",
                         ShapeError);
    CHECK_THROWS_WITH_AS(model.shard_optimizer_state(),
                         "PipelineGpt::shard_optimizer_state: the data group (dp × cp) has 1 rank; ZeRO-1 shards over two or more",
                         ShapeError);
  });
}

TEST_CASE("loss scaling: per token is the whole batch's mean; per micro-batch the mean of the means") {
  pc::Setup s;
  s.dp = 2, s.pp = 2, s.tp = 2, s.schedule = "1F1B", s.m = 4, s.dropout = 0.0;
  s.ignored = 3;  // micro-batch 0 of replica 0 counts 7 targets, the others 8
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 9);
  const auto b = pc::batch(s, c, 19);
  const auto whole = pc::dense(s, c, m, b, 0);
  // Per micro-batch, independently: the dense model on each micro-batch alone.
  const auto per_mb = pc::dense_per_microbatch(s, c, m, b);
  const double mean_of_means = per_mb.loss;
  const nn::Masters& avg = per_mb.grads;
  CHECK(std::abs(mean_of_means - whole.loss) > 1e-6);  // the ignored target makes them differ
  for (auto scaling : {nn::LossScaling::tokens, nn::LossScaling::microbatches}) {
    s.scaling = scaling;
    const bool tokens = scaling == nn::LossScaling::tokens;
    CAPTURE(tokens);
    const auto out = run_world(s, c, m, b);
    const double want = tokens ? whole.loss : mean_of_means;
    CHECK(std::abs(out[0].loss - want) <= 1e-12 * want);
    const auto worst = pc::worst_error(merge(s, out, 0), tokens ? whole.grads : avg);
    const double err = worst.first;
    const std::string at = worst.second;
    CAPTURE(at);
    CHECK(err <= 1e-12);
  }
}

TEST_CASE("output deallocation: the bytes held drop by the outputs kept, op by op; the last stage keeps none") {
  for (bool sp : {false, true}) {
    for (const char* sched : {"1F1B", "interleaved"}) {
      pc::Setup s;
      s.dp = 1, s.pp = 4, s.tp = 2, s.schedule = sched, s.m = 8, s.sp = sp;
      CAPTURE(s.name());
      const auto c = pc::config(s);
      const auto m = pc::masters(c, 3);
      const auto b = pc::batch(s, c, 33);
      s.dealloc = false;
      const auto keep = run_world(s, c, m, b);
      s.dealloc = true;
      const auto drop = run_world(s, c, m, b);
      const auto sch = pc::schedule(s);
      // One output: this tp rank's block of X[L] for one micro-batch (R: T×h; Row: T/t × h).
      const std::size_t out_bytes = static_cast<std::size_t>(pc::kSeq * c.hidden / (sp ? s.tp : 1)) * sizeof(double);
      for (int r = 0; r < s.pp; ++r) {
        CAPTURE(r);
        const auto& a = keep[static_cast<std::size_t>(r * s.tp)].stats;
        const auto& d = drop[static_cast<std::size_t>(r * s.tp)].stats;
        REQUIRE(a.held.size() == sch.ranks[static_cast<std::size_t>(r)].size());
        REQUIRE(d.held.size() == a.held.size());
        // Outputs kept after op i: F so far minus backwards so far, on stages that send one.
        long live = 0;
        bool exact = true;
        for (std::size_t i = 0; i < a.held.size(); ++i) {
          const auto& op = sch.ranks[static_cast<std::size_t>(r)][i];
          const bool sends = sch.stage(r, op.chunk) < sch.stages() - 1;
          if (sends && op.kind == pipeline::OpKind::F) ++live;
          if (sends && (op.kind == pipeline::OpKind::BW || op.kind == pipeline::OpKind::B)) --live;
          exact = exact && a.held[i] - d.held[i] == static_cast<std::size_t>(live) * out_bytes;
        }
        CHECK(exact);
        if (sch.v == 1 && r == s.pp - 1) CHECK(d.peak_bytes == a.peak_bytes);
        else CHECK(d.peak_bytes < a.peak_bytes);
      }
    }
  }
}

TEST_CASE("the ledger: one send and one recv per message with its bytes and peer; shapes only with variable lengths") {
  for (bool varlen : {false, true}) {
    CAPTURE(varlen);
    pc::Setup s;
    s.dp = 1, s.pp = 2, s.tp = 2, s.schedule = "1F1B", s.m = 4, s.varlen = varlen;
    const auto c = pc::config(s);
    const auto m = pc::masters(c, 4);
    const auto b = pc::batch(s, c, 44);
    std::vector<std::map<std::string, std::size_t>> counts(4);
    std::vector<std::size_t> block_bytes(4), wrong_peer(4), emb(4);
    run_ranks(4, [&](ThreadComm& comm) {
      Ledger ledger;
      Mesh mesh(ledgered(comm, ledger), {{"pp", s.pp}, {"tp", s.tp}});
      (void)pc::run_rank(s, c, m, b, mesh);
      const auto r = static_cast<std::size_t>(comm.rank());
      const int peer = 1 - mesh.coord("pp");
      for (const auto& e : ledger.entries()) {
        if (e.axis == "embedding") ++emb[r];
        if (e.axis != "pp" || e.scope == "pp.loss") continue;
        const bool shape = e.scope.size() >= 5 && e.scope.compare(e.scope.size() - 5, 5, "shape") == 0;
        ++counts[r][std::string(shape ? "shape " : "") + std::string(to_string(e.kind))];
        if (!shape) block_bytes[r] += e.bytes;
        wrong_peer[r] += e.peer != peer;
      }
    });
    const std::size_t n = static_cast<std::size_t>(s.m);
    std::size_t block = 0;  // X[R] of every micro-batch, T_j×h doubles (the lengths vary with varlen)
    for (const auto& mb : b.replicas[0]) block += static_cast<std::size_t>(mb.rows() * c.hidden) * sizeof(double);
    for (std::size_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      CHECK(counts[r]["send"] == n);  // stage 0 sends 4 activations, stage 1 4 gradients
      CHECK(counts[r]["recv"] == n);
      CHECK(counts[r]["shape send"] == (varlen ? n : 0));
      CHECK(counts[r]["shape recv"] == (varlen ? n : 0));
      CHECK(block_bytes[r] == 2 * block);  // each micro-batch's activation one way, its gradient back
      CHECK(wrong_peer[r] == 0);
      CHECK(emb[r] == 1);  // the tied embedding's gradient: one all_reduce over the embedding group
    }
  }
}

TEST_CASE("errors name the values") {
  pc::Setup s;
  s.pp = 2, s.tp = 1;
  const auto c = pc::config(s);
  run_ranks(2, [&](ThreadComm& comm) {
    Mesh mesh(Group(comm), {{"pp", 2}, {"tp", 1}});
    const auto lay = pipeline::parse_layout(pc::layout(s), 2, c.layers);
    auto model = nn::PipelineGpt<double>::init(c, lay, mesh);
    CHECK_THROWS_WITH_AS(pipeline::Executor<nn::PipelineGpt<double>>(mesh.group("pp"), pipeline::one_f_one_b(4, 4), {}),
                         "pipeline::Executor: schedule '1F1B' is for p = 4 pipeline ranks, the pp group has 2",
                         pipeline::PipelineError);
    pipeline::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"), pipeline::interleaved_1f1b(2, 4, 2), {});
    model.set_microbatches(pc::batch(s, c, 1).replicas[0], nn::LossScaling::microbatches);
    CHECK_THROWS_WITH_AS(ex.run(model),
                         "pipeline::Executor: schedule 'interleaved 1F1B' runs v = 2 model chunks per rank, the model has 1",
                         pipeline::PipelineError);
    CHECK_THROWS_WITH_AS(nn::PipelineGpt<double>::init(c, pipeline::parse_layout("Et*8|L", 1, 8), mesh),
                         "pipeline layout \"Et*8|L\" is for 1 pipeline ranks, the mesh has pp = 2",
                         pipeline::PipelineLayoutError);
    CHECK_THROWS_WITH_AS(nn::PipelineGpt<double>::init(c, pipeline::parse_layout("Et*4|t*3mL", 2, 7), mesh),
                         "pipeline layout \"Et*4|t*3mL\": 7 decoder layers 't', the model has 8",
                         pipeline::PipelineLayoutError);
    CHECK_THROWS_WITH_AS(nn::PipelineGpt<double>::init(c, pipeline::parse_layout("Et*4|t*4mL", 2, 8), mesh),
                         "pipeline layout \"Et*4|t*4mL\": stage 1 (pp rank 1, vp stage 0) has a multi-token-prediction "
                         "layer 'm'; shardalg has no MTP head to build",
                         pipeline::PipelineLayoutError);
    CHECK_THROWS_WITH_AS(model.set_microbatches(pc::batch(s, c, 1).replicas[0], nn::LossScaling::tokens, 0),
                         "PipelineGpt: per-token loss scaling needs the global batch's target count, got 0", ShapeError);
  });
}

// ---- Stages that disagree, and stages that fail (p2p.hpp: what arrives is what is expected;
// executor.hpp: receives are cancelled while an error unwinds) ----

namespace {

/// Two micro-batches of the same 16 tokens: (seq 8, 1 sequence) each on rank 0, (seq 4, 2
/// sequences) on rank `other` — the same bytes between stages, another model.
std::vector<nn::MicroBatch> microbatches(bool split_differently) {
  std::vector<nn::MicroBatch> out;
  for (int j = 0; j < 2; ++j) {
    nn::MicroBatch mb;
    for (int k = 0; k < 8; ++k) mb.tokens.push_back((5 * k + j) % 37), mb.targets.push_back((3 * k + 1 + j) % 37);
    mb.seq = split_differently ? 4 : 8, mb.sequences = split_differently ? 2 : 1, mb.row_base = 8 * j;
    out.push_back(std::move(mb));
  }
  return out;
}

/// nn::PipelineGpt whose forward of micro-batch `fail_mb` throws on pp rank `fail_rank`.
struct FailingStage {
  using Inner = nn::PipelineGpt<double>;
  using Act = Inner::Act;
  using State = Inner::State;
  Inner& m;
  int pp_rank, fail_rank, fail_mb;
  [[nodiscard]] Group tp() const { return m.tp(); }
  [[nodiscard]] pipeline::ActShape shape(int mb) const { return m.shape(mb); }
  std::optional<Act> forward(int c, int mb, std::optional<Act> in, State& st) {
    if (pp_rank == fail_rank && mb == fail_mb) throw std::runtime_error("stage failed in its forward");
    return m.forward(c, mb, std::move(in), st);
  }
  std::optional<Act> backward(int c, int mb, State& st, std::optional<Act> dy, bool w) {
    return m.backward(c, mb, st, std::move(dy), w);
  }
  void weights(int c, int mb, State& st) { m.weights(c, mb, st); }
  [[nodiscard]] std::size_t bytes(const State& st) const { return m.bytes(st); }
};

}  // namespace

TEST_CASE("stages that disagree on the micro-batches fail on the receiving stage, fixed or variable lengths") {
  pc::Setup s;
  s.pp = 2, s.tp = 1, s.m = 2;
  const auto c = pc::config(s);
  const auto masters = pc::masters(c, 5);
  for (bool variable : {false, true}) {
    for (bool overlap : {false, true}) {
      CAPTURE(variable);
      CAPTURE(overlap);
      std::vector<std::string> got(2, "ok");
      try {
        run_ranks(2, [&](ThreadComm& comm) {
          Mesh mesh(Group(comm), {{"pp", 2}, {"tp", 1}});
          const auto lay = pipeline::parse_layout(pc::layout(s), 2, c.layers);
          auto model = nn::PipelineGpt<double>::init(c, lay, mesh, &masters);
          model.set_microbatches(microbatches(comm.rank() == 1), nn::LossScaling::microbatches);
          pipeline::ExecOptions o;
          o.p2p.variable_seq_lengths = variable;
          o.overlap_p2p = overlap;
          pipeline::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"), pipeline::one_f_one_b(2, 2), o);
          try {
            (void)ex.run(model);
          } catch (const CommAbortedError&) {
            throw;
          } catch (const std::exception& e) {
            got[static_cast<std::size_t>(comm.rank())] = e.what();
            throw;
          }
        });
      } catch (const std::exception&) {
      }
      CHECK(got[1] == (variable ? "pipeline p2p: pp rank 1 expected a message of shape (seq 4, batch 2, hidden 16) "
                                  "from pp rank 0, which sent (seq 8, batch 1, hidden 16)"
                                : "ThreadComm: mismatched point-to-point: rank 1 receives f64 × 128, layout R, shape "
                                  "(4, 2, 16) from rank 0, which sent f64 × 128, layout R, shape (8, 1, 16)"));
      CHECK(got[0] == "ok");  // rank 0 is aborted (its message is fine)
    }
  }
}

TEST_CASE("a stage that throws with receives posted (overlap) ends the run with its error, checked or not") {
  pc::Setup s;
  s.pp = 2, s.tp = 1, s.m = 2;
  const auto c = pc::config(s);
  const auto masters = pc::masters(c, 5);
  for (bool checked : {false, true}) {
    for (int fail_rank : {0, 1}) {
      CAPTURE(checked);
      CAPTURE(fail_rank);
      CollectiveCheck chk(checked);
      CHECK_THROWS_WITH_AS(run_ranks(2,
                                     [&](ThreadComm& comm) {
                                       Mesh mesh(Group(comm), {{"pp", 2}, {"tp", 1}});
                                       const auto lay = pipeline::parse_layout(pc::layout(s), 2, c.layers);
                                       auto model = nn::PipelineGpt<double>::init(c, lay, mesh, &masters);
                                       model.set_microbatches(microbatches(false), nn::LossScaling::microbatches);
                                       pipeline::ExecOptions o;
                                       o.overlap_p2p = true;
                                       FailingStage stage{model, mesh.coord("pp"), fail_rank, 1};
                                       pipeline::Executor<FailingStage> ex(mesh.group("pp"), pipeline::one_f_one_b(2, 2), o);
                                       (void)ex.run(stage);
                                     }),
                           "stage failed in its forward", std::runtime_error);
    }
  }
}

TEST_CASE("a schedule for more micro-batches than the model was given is refused by name") {
  pc::Setup s;
  s.pp = 2, s.tp = 1, s.m = 2;
  const auto c = pc::config(s);
  CHECK_THROWS_WITH_AS(run_ranks(2,
                                 [&](ThreadComm& comm) {
                                   Mesh mesh(Group(comm), {{"pp", 2}, {"tp", 1}});
                                   const auto lay = pipeline::parse_layout(pc::layout(s), 2, c.layers);
                                   auto model = nn::PipelineGpt<double>::init(c, lay, mesh);
                                   model.set_microbatches(microbatches(false), nn::LossScaling::microbatches);
                                   pipeline::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"),
                                                                                  pipeline::one_f_one_b(2, 4), {});
                                   (void)ex.run(model);
                                 }),
                       "pipeline::Executor: schedule '1F1B' runs m = 4 micro-batches, the model was given 2",
                       pipeline::PipelineError);
}
