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
//   (4) fp16 with dynamic loss scaling: an overflowing scale backs off step by step (nothing
//       applied), then the run trains beside fp32; the scaler's rules and its errors.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <cmath>
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

TEST_CASE("fp16 with dynamic loss scaling: an overflowing scale backs off, then the run trains beside fp32") {
  using F16 = Eigen::half;
  constexpr int kSteps = 20;
  const auto fp32 = gt::train<float>(gt::tiny(false), Group(SelfComm{}), kSteps);
  const auto distance = [](double loss) { return 3.0 * std::ldexp(1.0, std::ilogb(loss) - 7); };
  for (int p : {1, 2}) {
    for (double initial : {std::ldexp(1.0, 8), std::ldexp(1.0, 40)}) {
      CAPTURE(p);
      CAPTURE(initial);
      struct Run {
        std::vector<double> losses;
        long overflows;
        double scale;
      };
      const auto runs = testing::per_rank<Run>(p, [&](const Group& g) {
        const auto c = gt::tiny(false);
        auto model = nn::Gpt<F16>::init(c, g);
        const auto o = gt::adam_options();
        nn::Adam<F16> opt({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
        nn::LossScaler scaler({initial, 2.0, 0.5, 1000, 1.0});
        model.set_loss_scale(scaler.scale());
        Run r;
        for (int s = 0; r.losses.size() < std::size_t{kSteps}; ++s) {  // the skipped steps repeat their batch
          const auto [x, y] = gt::batch_at(c, gt::kText, static_cast<long>(r.losses.size()));
          const double l = static_cast<double>(static_cast<float>(model.forward_backward(x, y)));
          model.step(opt, 1.0, scaler);
          if (!model.last_step_skipped()) r.losses.push_back(l);
          REQUIRE(s < 200);
        }
        r.overflows = scaler.overflows();
        r.scale = scaler.scale();
        return r;
      });
      for (const auto& r : runs) {
        if (initial > 1e6) {
          CHECK(r.overflows >= 1);  // 2^40 · dL overflows fp16 (max 65504): skipped, halved, until it fits
          CHECK(r.scale == initial * std::pow(0.5, static_cast<double>(r.overflows)));
        } else {
          CHECK(r.overflows == 0);
        }
        for (std::size_t s = 0; s < r.losses.size(); ++s)
          CHECK_MESSAGE(std::abs(r.losses[s] - fp32[s]) <= distance(fp32[s]),
                        "step " << s << ": fp16 " << r.losses[s] << ", fp32 " << fp32[s]);
      }
      MESSAGE("fp16, TP " << p << ", initial scale 2^" << std::ilogb(initial) << ": " << runs[0].overflows
                          << " steps skipped, final scale 2^" << std::ilogb(runs[0].scale) << ", last loss "
                          << runs[0].losses.back() << " (fp32 " << fp32.back() << ")");
    }
  }
  // The step sees the unscaled gradient: at scale 2^8 the norm it returns and an SGD update (which,
  // unlike Adam, a missing unscale would change 256-fold) are those at scale 1.
  {
    const auto c = gt::tiny(false);
    const auto [x, y] = gt::batch_at(c, gt::kText, 0);
    double norms[2];
    nn::Masters after[2];
    const nn::Masters before = nn::Gpt<F16>::init(c, Group(SelfComm{})).masters();
    for (int k = 0; k < 2; ++k) {
      auto m = nn::Gpt<F16>::init(c, Group(SelfComm{}));
      nn::Sgd<F16> sgd({0.5, 0.0, 0.0});
      nn::LossScaler sc({k == 0 ? 1.0 : 256.0, 2.0, 0.5, 10, 1.0});
      m.set_loss_scale(sc.scale());
      m.forward_backward(x, y);
      norms[k] = m.step(sgd, 0.0, sc);
      after[k] = m.masters();
    }
    CHECK(norms[1] == doctest::Approx(norms[0]).epsilon(0.01));
    double moved = 0, apart = 0;
    for (const auto& [name, w] : before) {
      moved = std::max(moved, (after[0].at(name) - w).cwiseAbs().maxCoeff());
      apart = std::max(apart, (after[1].at(name) - after[0].at(name)).cwiseAbs().maxCoeff());
    }
    CHECK(moved > 1e-3);
    CHECK(apart <= 0.05 * moved);
  }
  // The gradients must be made at the scaler's scale.
  auto model = nn::Gpt<F16>::init(gt::tiny(false), Group(SelfComm{}));
  nn::Adam<F16> opt;
  nn::LossScaler scaler({256.0, 2.0, 0.5, 10, 1.0});
  const auto [x, y] = gt::batch_at(gt::tiny(false), gt::kText, 0);
  model.forward_backward(x, y);
  CHECK_THROWS_WITH_AS(model.step(opt, 1.0, scaler),
                       "Gpt: the gradients were made at loss scale 1, the scaler's is 256; set_loss_scale(scaler.scale()) "
                       "before forward_backward",
                       ShapeError);
  CHECK_THROWS_WITH_AS(model.set_loss_scale(0.0), "Gpt: loss scale 0 must be positive and finite", ShapeError);
}
