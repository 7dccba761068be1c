// Training in fp16 on the CPU with dynamic loss scaling (nn::LossScaler): an overflowing scale
// backs off step by step (nothing applied), then the run trains beside fp32 at TP 1 and 2. The
// scaler's own rules and the bf16 runs: test_mixed_training.cpp.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../gpt/gpt_cases.hpp"
#include "shardalg/nn/optim/loss_scaler.hpp"
#include "testing.hpp"

using namespace shardalg;

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
