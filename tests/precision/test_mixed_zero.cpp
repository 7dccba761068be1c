// ZeRO-1 in bf16: DataParallelGpt<bf16> stepped by ShardedAdam, whose fp32 moments and fp32 master
// are split over the data-parallel ranks (12Ψ/d bytes of state per rank), against the same model
// stepped by Adam (every rank the whole fp32 state): the same losses and the same bf16 weights, bit
// for bit, at DP 2 × TP 1 and 2 (no clipping, so the two apply the same reduced gradients); and a
// run resumed from its weights and the gathered optimizer state (the master included) continues
// bit for bit, where one resumed without the master does not.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <mutex>
#include <vector>

#include <shardalg/nn/models/data_parallel.hpp>
#include <shardalg/nn/optim/sharded_adam.hpp>

#include "../gpt/gpt_cases.hpp"
#include "testing.hpp"

using namespace shardalg;
using B16 = Eigen::bfloat16;

namespace {

/// gt's Adam options for a bf16 model.
nn::Adam<B16>::Options options() {
  const auto o = gt::adam_options();
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
}

struct Outcome {
  std::vector<double> losses;
  nn::Masters weights;
  std::size_t state_bytes = 0;       // rank 0's optimizer state
  std::size_t expected_bytes = 0;    // 3 fp32 slices of every padded bucket ÷ d
};

/// `steps` steps at DP d × TP t of the tiny GPT in bf16, Adam or ShardedAdam, no clipping.
Outcome run(int d, int t, int steps, bool zero) {
  Outcome out;
  std::mutex m;
  run_ranks(d * t, [&](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", d}, {"tp", t}});
    const auto c = gt::tiny(false);
    auto model = nn::DataParallelGpt<B16>::init(c, mesh, {});
    nn::Adam<B16> adam(options());
    nn::ShardedAdam<B16> sharded(options());
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const auto [x, y] = gt::batch_at(c, gt::kText, s);
      losses.push_back(static_cast<double>(model.forward_backward(x, y)));
      if (zero) model.step(sharded, 0.0);
      else model.step(adam, 0.0);
    }
    auto w = model.masters();
    if (comm.rank() == 0) {
      std::lock_guard lk(m);
      out.losses = losses;
      out.weights = std::move(w);
      out.state_bytes = sharded.state_bytes();
      for (const auto& mo : sharded.m()) out.expected_bytes += 3 * static_cast<std::size_t>(mo.size()) * sizeof(float);
    }
  });
  return out;
}

std::size_t differing(const nn::Masters& a, const nn::Masters& b) {
  std::size_t n = 0;
  for (const auto& [name, w] : a) {
    const auto& v = b.at(name);
    REQUIRE(w.size() == v.size());
    for (Index i = 0; i < w.size(); ++i) n += w.data()[i] != v.data()[i];
  }
  return n;
}

}  // namespace

TEST_CASE("ZeRO-1 in bf16: ShardedAdam's fp32 moment and master slices step the weights as Adam does, bit for bit") {
  for (int t : {1, 2}) {
    CAPTURE(t);
    const Outcome plain = run(2, t, 6, false), zero = run(2, t, 6, true);
    CHECK(zero.losses == plain.losses);
    CHECK(differing(zero.weights, plain.weights) == 0);
    CHECK(zero.losses.back() < zero.losses.front());  // it trains
    // m, v and the master: fp32, this rank's 1/d of every padded bucket.
    CHECK(zero.state_bytes == zero.expected_bytes);
    CHECK(zero.state_bytes > 0);
    MESSAGE("DP 2 × TP ", t, ": ", zero.state_bytes, " bytes of optimizer state on rank 0");
  }
}

TEST_CASE("ZeRO-1 in bf16: resumed from its weights and the gathered state (fp32 master included), it continues bit "
          "for bit") {
  auto c = gt::tiny(false);
  c.dropout = 0.0;  // the masks are keyed by the model's step, which a fresh model restarts
  auto continued = [&](bool with_master) {
    nn::Masters after;
    std::mutex m;
    run_ranks(4, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
      auto a = nn::DataParallelGpt<B16>::init(c, mesh, {});
      nn::ShardedAdam<B16> oa(options());
      for (int s = 0; s < 3; ++s) {
        const auto [x, y] = gt::batch_at(c, gt::kText, s);
        a.forward_backward(x, y);
        a.step(oa, 0.0);
      }
      // Saved: the weights and the optimizer state gathered to logical masters.
      const nn::Masters w = a.masters();
      nn::Masters state = a.optimizer_masters(oa);
      if (!with_master) std::erase_if(state, [](const auto& kv) { return kv.first.rfind("master.", 0) == 0; });
      // Resumed in a fresh model and optimizer; both continue 3 steps.
      auto b = nn::DataParallelGpt<B16>::init(c, mesh, {});
      b.load(w);
      nn::ShardedAdam<B16> ob(options());
      b.load_optimizer(ob, state);
      ob.set_step_count(oa.step_count());
      for (int s = 3; s < 6; ++s) {
        const auto [x, y] = gt::batch_at(c, gt::kText, s);
        a.forward_backward(x, y);
        a.step(oa, 0.0);
        b.forward_backward(x, y);
        b.step(ob, 0.0);
      }
      auto wa = a.masters(), wb = b.masters();
      if (comm.rank() == 0) {
        std::lock_guard lk(m);
        after = wa;
        for (auto& [name, v] : wb) after["resumed." + name] = v;
      }
    });
    std::size_t n = 0;
    for (const auto& [name, w] : after) {
      if (name.rfind("resumed.", 0) == 0) continue;
      const auto& v = after.at("resumed." + name);
      for (Index i = 0; i < w.size(); ++i) n += w.data()[i] != v.data()[i];
    }
    return n;
  };
  CHECK(continued(true) == 0);
  const std::size_t without = continued(false);
  MESSAGE("resumed without the fp32 master: ", without, " weights differ after 3 steps");
  CHECK(without > 0);
}
