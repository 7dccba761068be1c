// Training in bf16 on the CPU: 16-bit weights, activations and gradients, fp32 arithmetic in every
// kernel, and Adam with fp32 moments and master weights.
//   (1) Adam on bf16 parameters follows the fp32 trajectory: after every step the bf16 weight is
//       the fp32 Adam's weight rounded, also where each update is below half a bf16 ulp (the
//       master keeps what the 16-bit weight cannot); a weight loaded from outside re-seeds it;
//   (2) the GPT trains in bf16 at TP 1, 2 and 4, with and without SP: 20 steps whose losses stay
//       within a stated distance of the fp32 run (not a derived bound: the running bound through a
//       whole model is vacuous, docs/verify.md) and fall;
//   (3) the memory per parameter is the Playbook's 2 + 2 + 12 bytes: measure_memory on a bf16
//       model (bf16 weights and gradients; fp32 master, m and v);
//   (4) gradient accumulation with fp32 main grads (Megatron's main_grad): eight micro-batches'
//       bf16 gradients summed in fp32 stay within the derived bound of a float sum of exact
//       terms, γ_{k−1}·Σ|g_k| (a bf16 running sum exceeds it by orders of magnitude), and the step
//       applies their mean: the global norm is the mean's, and Adam's fp32 master receives it;
//   (5) a run resumed from its weights and optimizer state (Adam's fp32 masters included) continues
//       bit for bit;
//   (6) the loss scaler's rules and its errors. fp16 training with dynamic loss scaling is in
//       test_mixed_fp16.cpp (the GPT in bf16 and in fp16 in one TU took 1.1 GB of compiler memory).
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../gpt/gpt_cases.hpp"
#include "shardalg/nn/optim/loss_scaler.hpp"
#include "shardalg/nn/train/measured_memory.hpp"
#include "testing.hpp"

using namespace shardalg;
using B16 = Eigen::bfloat16;

namespace {

template <class T>
testing::Mat<T> bf16_values(Index r, Index c, std::uint64_t seed, double scale) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  testing::Mat<T> m(r, c);
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = static_cast<T>(static_cast<float>(B16(static_cast<float>(u(gen)))));
  return m;
}

}  // namespace

TEST_CASE("Adam on bf16 parameters: fp32 moments and master, the weight is the fp32 trajectory rounded") {
  const Group g(SelfComm{});
  // 1e-4: every update is below half an ulp of the weights (|w| ≥ 1/4: ulp ≥ 2^-9), so a bf16
  // weight updated in bf16 would never move; through the master it moves after a few steps.
  for (double lr : {1e-2, 1e-4}) {
    CAPTURE(lr);
    const nn::Adam<float>::Options o{lr, 0.9, 0.95, 1e-8, 0.01};
    nn::Adam<float> af(o);
    nn::Adam<B16> ab({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
    testing::Mat<float> w0 = bf16_values<float>(6, 5, 1, 0.5);
    w0.array() += 0.75f;  // |w| in [0.25, 1.25], rounded to bf16 again
    w0 = w0.cast<B16>().cast<float>();
    auto wf = shard<Replicated>(w0, g);
    auto wb = shard<Replicated>(testing::Mat<B16>(w0.cast<B16>()), g);
    const nn::ParamInfo info{"w", true, {}};
    int moved = 0;
    for (int t = 0; t < 60; ++t) {
      const testing::Mat<float> gr = bf16_values<float>(6, 5, 100 + t, 1.0);
      af.begin_step();
      ab.begin_step();
      af.update(info, wf, shard<Replicated>(gr, g));
      ab.update(info, wb, shard<Replicated>(testing::Mat<B16>(gr.cast<B16>()), g));
      const testing::Mat<B16> want = wf.local().cast<B16>();
      CHECK((wb.local().array() == want.array()).all());
      moved += (wb.local().cast<float>().array() != w0.array()).count() > 0;
    }
    CHECK(moved > 0);
    const auto& st = ab.state().at("w");
    CHECK(st.master.size() == 30);
    CHECK(std::is_same_v<typename nn::Adam<B16>::State, float>);
    // A weight set from outside re-seeds its master: the next update starts from it.
    wb.local().setConstant(B16(0.5f));
    wf.local().setConstant(0.5f);
    af.set_step_count(0);
    ab.set_step_count(0);
    af.state().clear();
    ab.state().at("w").m.setZero();
    ab.state().at("w").v.setZero();
    af.begin_step();
    ab.begin_step();
    const testing::Mat<float> gr = bf16_values<float>(6, 5, 999, 1.0);
    af.update(info, wf, shard<Replicated>(gr, g));
    ab.update(info, wb, shard<Replicated>(testing::Mat<B16>(gr.cast<B16>()), g));
    CHECK((wb.local().array() == wf.local().cast<B16>().array()).all());
  }
}

TEST_CASE("the GPT trains in bf16 at TP 1, 2 and 4, with and without SP, beside the fp32 run") {
  constexpr int kSteps = 20;
  // The mean loss is stored in bf16 (at a loss in [2, 4) one ulp is 2^-6 ≈ 0.016); allowed: three
  // ulps of the fp32 loss — a stated tolerance, not a derived bound.
  const auto distance = [](double loss) { return 3.0 * std::ldexp(1.0, std::ilogb(loss) - 7); };
  const auto fp32 = gt::train<float>(gt::tiny(false), Group(SelfComm{}), kSteps);
  double worst = 0;
  for (int p : {1, 2, 4}) {
    for (bool sp : {false, true}) {
      if (p == 1 && sp) continue;
      CAPTURE(p);
      CAPTURE(sp);
      const auto curves =
          testing::per_rank<std::vector<double>>(p, [&](const Group& g) { return gt::train<B16>(gt::tiny(sp), g, kSteps); });
      for (const auto& cv : curves) {
        REQUIRE(cv.size() == fp32.size());
        for (std::size_t s = 0; s < cv.size(); ++s) {
          CHECK_MESSAGE(std::abs(cv[s] - fp32[s]) <= distance(fp32[s]),
                        "step " << s << ": bf16 " << cv[s] << ", fp32 " << fp32[s]);
          worst = std::max(worst, std::abs(cv[s] - fp32[s]));
        }
        CHECK(cv.back() < cv.front() - 0.5);  // it learns
      }
    }
  }
  MESSAGE("bf16 against fp32, 20 steps, TP 1/2/4 ± SP: largest loss difference " << worst << " (fp32 "
                                                                                     << fp32.front() << " → " << fp32.back() << ")");
}

TEST_CASE("bf16 training holds 2 + 2 + 12 bytes per parameter: bf16 weights and gradients, fp32 master, m and v") {
  for (int p : {1, 2}) {
    CAPTURE(p);
    const auto reports = testing::per_rank<nn::MemoryReport>(p, [&](const Group& g) {
      auto c = gt::tiny(false);
      auto model = nn::Gpt<B16>::init(c, g);
      nn::Adam<B16> opt({1e-3, 0.9, 0.95, 1e-8, 0.0});
      const auto [x, y] = gt::batch_at(c, gt::kText, 0);
      return nn::measure_memory(model, opt, x, y, 1.0);
    });
    for (const auto& r : reports) {
      CHECK(r.element_bytes == 2);
      CHECK(r.parameters.measured_bytes == 2 * r.parameter_count);
      CHECK(r.gradients.measured_bytes == 2 * r.parameter_count);
      CHECK(r.optimizer.measured_bytes == 12 * r.parameter_count);
      MESSAGE("TP " << p << ": " << r.parameter_count << " parameters on rank " << r.rank << ", bytes per parameter "
                    << r.parameters.measured_bytes / r.parameter_count << " + "
                    << r.gradients.measured_bytes / r.parameter_count << " + "
                    << r.optimizer.measured_bytes / r.parameter_count);
    }
  }
}

// Megatron's main_grad: each micro-batch's bf16 gradient (an exact float) added into an fp32
// accumulator. k terms summed in float in any order: |computed − exact| ≤ γ_{k−1}·Σ|g_k|,
// γ_n = n·u/(1 − n·u), u = 2⁻²⁴. The step divides by k: its norm is the mean's; with Adam (β's as
// below, ε = 1, no decay) the first update is lr·ḡ/(|ḡ| + 1), ḡ the mean, applied to the fp32
// master, and the bf16 weight is the master rounded (within one bf16 ulp of the value computed
// here in double).
TEST_CASE("main_grad: micro-batch gradients summed in fp32 within their bound; step() applies the mean") {
  constexpr int kMicro = 8;
  const double u = std::ldexp(1.0, -24), gamma = (kMicro - 1) * u / (1 - (kMicro - 1) * u);
  for (int p : {1, 2}) {
    CAPTURE(p);
    struct Out {
      std::vector<nn::Masters> per;
      nn::Masters main, before, after;
      double norm = 0;
    };
    const auto outs = testing::per_rank<Out>(p, [&](const Group& g) {
      Out o;
      auto c = gt::tiny(false);
      c.dropout = 0.0;
      auto model = nn::Gpt<B16>::init(c, g);
      o.before = model.masters();
      for (int k = 0; k < kMicro; ++k) {
        const auto [x, y] = gt::batch_at(c, gt::kText, k);
        model.forward_backward(x, y);
        o.per.push_back(model.grad_masters());
        model.accumulate_gradients();
      }
      CHECK(model.accumulated_micro_batches() == kMicro);
      o.main = model.main_grad_masters();
      nn::Adam<B16> opt({1.0, 0.9, 0.95, 1.0, 0.0});
      o.norm = model.step(opt, 0.0);
      CHECK(model.accumulated_micro_batches() == 0);
      o.after = model.masters();
      return o;
    });
    const Out& o = outs[0];
    double worst = 0, worst16 = 0, sq = 0, w_worst = 0;
    long moved = 0;
    for (const auto& [name, m] : o.main) {
      Eigen::MatrixXd exact = Eigen::MatrixXd::Zero(m.rows(), m.cols()), mag = exact, run16 = exact;
      for (const auto& per : o.per) {
        const auto& gk = per.at(name);
        exact += gk;
        mag += gk.cwiseAbs();
        // the same sum kept in bf16 (each add rounded to bf16): what main_grad avoids
        run16 = (run16 + gk).unaryExpr([](double v) { return static_cast<double>(static_cast<float>(B16(static_cast<float>(v)))); });
      }
      const Eigen::MatrixXd bound = (gamma * mag).array() + 1e-300;
      worst = std::max(worst, ((m - exact).cwiseAbs().array() / bound.array()).maxCoeff());
      worst16 = std::max(worst16, ((run16 - exact).cwiseAbs().array() / bound.array()).maxCoeff());
      const Eigen::MatrixXd mean = m / kMicro;
      sq += mean.squaredNorm();
      // Adam's first step from the mean: m̂ = ḡ, v̂ = ḡ², so Δ = lr·ḡ/(|ḡ| + ε), lr = ε = 1
      const auto& w0 = o.before.at(name);
      const Eigen::MatrixXd want = w0.array() - mean.array() / (mean.array().abs() + 1.0);
      const auto& w1 = o.after.at(name);
      for (Index i = 0; i < w1.size(); ++i) {
        const double ulp = std::ldexp(1.0, std::ilogb(std::max({std::abs(want.data()[i]), std::abs(w0.data()[i]), 1e-30})) - 7);
        w_worst = std::max(w_worst, std::abs(w1.data()[i] - want.data()[i]) / ulp);
        moved += w1.data()[i] != w0.data()[i];
      }
    }
    MESSAGE("p=" << p << ": fp32 main_grad error ÷ bound max " << worst << "; kept in bf16 it would be " << worst16
                 << "; weights within " << w_worst << " bf16 ulp of the mean's Adam step");
    CHECK(worst <= 1.0);
    CHECK(worst16 > 100.0);  // the bound tells an fp32 sum from a bf16 one
    CHECK(o.norm == doctest::Approx(std::sqrt(sq)).epsilon(1e-5));  // the mean's norm, not the sum's
    CHECK(w_worst <= 1.0);
    CHECK(moved > 0);
  }
}

TEST_CASE("main_grad: a forward_backward not accumulated before step(), and one accumulated twice, are errors") {
  auto c = gt::tiny(false);
  auto model = nn::Gpt<B16>::init(c, Group(SelfComm{}));
  nn::Adam<B16> opt({1e-3, 0.9, 0.95, 1e-8, 0.0});
  CHECK_THROWS_WITH_AS(model.accumulate_gradients(),
                       "Gpt: accumulate_gradients() without new gradients (0 accumulated); call forward_backward first",
                       ShapeError);
  const auto [x, y] = gt::batch_at(c, gt::kText, 0);
  model.forward_backward(x, y);
  model.accumulate_gradients();
  CHECK_THROWS_WITH_AS(model.accumulate_gradients(),
                       "Gpt: accumulate_gradients() without new gradients (1 accumulated); call forward_backward first",
                       ShapeError);
  model.forward_backward(x, y);
  CHECK_THROWS_WITH_AS(model.step(opt, 0.0),
                       "Gpt: step() after 1 accumulated micro-batch and a forward_backward not accumulated; call "
                       "accumulate_gradients() after each",
                       ShapeError);
  model.accumulate_gradients();
  CHECK(model.accumulated_micro_batches() == 2);
  CHECK(std::isfinite(model.step(opt, 0.0)));
  CHECK_THROWS_WITH_AS(model.main_grad_masters(),
                       "Gpt: main_grad_masters() without accumulated gradients; call accumulate_gradients first",
                       ShapeError);
}

// Adam's fp32 master of a bf16 weight holds what the weight cannot (each update here is about an
// ulp of the weights, so the master keeps a residue the bf16 weight rounds away). A run resumed from
// the weights and optimizer_masters() continues bit for bit; resumed without the "master."
// tensors (re-seeded from the rounded weights, as before they were saved) it does not.
TEST_CASE("a bf16 run resumed from its weights and optimizer state continues bit for bit; without the fp32 master it does not") {
  auto c = gt::tiny(false);
  c.dropout = 0.0;
  const Group g(SelfComm{});
  const nn::Adam<B16>::Options o{1e-4, 0.9, 0.95, 1e-8, 0.0};
  const auto train = [&](nn::Gpt<B16>& model, nn::Adam<B16>& opt, int from, int to) {
    for (int s = from; s < to; ++s) {
      const auto [x, y] = gt::batch_at(c, gt::kText, s);
      model.forward_backward(x, y);
      model.step(opt, 1.0);
    }
  };
  auto model = nn::Gpt<B16>::init(c, g);
  nn::Adam<B16> opt(o);
  train(model, opt, 0, 3);
  const nn::Masters weights = model.masters(), state = model.optimizer_masters(opt);
  long masters = 0;
  for (const auto& [k, v] : state) masters += k.rfind("master.", 0) == 0;
  CHECK(masters == static_cast<long>(weights.size()));  // one fp32 master per logical tensor
  train(model, opt, 3, 6);
  const nn::Masters want = model.masters();
  const auto resumed = [&](const nn::Masters& st) {
    auto m2 = nn::Gpt<B16>::from_masters(c, weights, g);
    m2.set_steps(3);
    nn::Adam<B16> o2(o);
    o2.set_step_count(3);
    m2.load_optimizer(o2, st);
    train(m2, o2, 3, 6);
    return m2.masters();
  };
  const auto differing = [&](const nn::Masters& got) {
    long n = 0;
    for (const auto& [k, v] : want) n += (got.at(k).array() != v.array()).count();
    return n;
  };
  CHECK(differing(resumed(state)) == 0);
  nn::Masters without = state;
  for (auto it = without.begin(); it != without.end();) it = it->first.rfind("master.", 0) == 0 ? without.erase(it) : std::next(it);
  const long off = differing(resumed(without));
  MESSAGE("resumed without the fp32 master: " << off << " weights differ after 3 more steps");
  CHECK(off > 0);
}

TEST_CASE("LossScaler: back off on an overflow, grow after the interval, refuse bad options") {
  nn::LossScaler s({1024.0, 2.0, 0.5, 3, 1.0});
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 1024.0);
  s.update(false);
  CHECK(s.scale() == 2048.0);  // three finite steps in a row
  s.update(false);
  s.update(true);
  CHECK(s.scale() == 1024.0);
  CHECK(s.good_steps() == 0);
  CHECK(s.overflows() == 1);
  for (int i = 0; i < 20; ++i) s.update(true);
  CHECK(s.scale() == 1.0);  // not below min_scale
  CHECK_THROWS_WITH_AS(nn::LossScaler({0.0, 2.0, 0.5, 3, 1.0}),
                       "LossScaler: initial scale 0, growth 2, backoff 0.5, growth interval 3, minimum 1: need initial > 0 "
                       "and finite, growth ≥ 1, 0 < backoff < 1, interval ≥ 1, minimum > 0",
                       ShapeError);
}
