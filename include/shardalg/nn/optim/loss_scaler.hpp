// shardalg/nn/optim/loss_scaler.hpp — dynamic loss scaling for fp16 training: the loss gradient
// is multiplied by a scale s before the backward, so that small gradients do not underflow in
// fp16; the step divides by s again. A non-finite gradient (an overflow) skips the step and
// multiplies s by `backoff`; `growth_interval` finite steps in a row multiply it by `growth`.
//
//   dL/dθ stored = s · dL/dθ;   update with dL/dθ = stored / s   (after the clip, on the unscaled norm)
//
// Gpt::step(opt, max_grad_norm, scaler) runs it (nn/models/gpt.hpp): the model's loss scale must
// equal scaler.scale() at the forward_backward, and step() sets it for the next one.
#pragma once

#include <algorithm>
#include <cmath>

#include "shardalg/base/errors.hpp"

namespace shardalg::nn {

struct LossScalerOptions {
  double initial = 65536.0;     // 2^16
  double growth = 2.0;
  double backoff = 0.5;
  long growth_interval = 1000;  // finite steps in a row before the scale grows
  double min_scale = 1.0;
};

class LossScaler {
 public:
  using Options = LossScalerOptions;

  explicit LossScaler(Options o = {}) : o_(o), scale_(o.initial) {
    if (!(o.initial > 0 && std::isfinite(o.initial)) || !(o.growth >= 1) || !(o.backoff > 0 && o.backoff < 1) ||
        o.growth_interval < 1 || !(o.min_scale > 0))
      throw ShapeError(shardalg::detail::cat("LossScaler: initial scale ", o.initial, ", growth ", o.growth, ", backoff ",
                                             o.backoff, ", growth interval ", o.growth_interval, ", minimum ", o.min_scale,
                                             ": need initial > 0 and finite, growth ≥ 1, 0 < backoff < 1, interval ≥ 1, "
                                             "minimum > 0"));
  }

  [[nodiscard]] double scale() const { return scale_; }
  [[nodiscard]] const Options& options() const { return o_; }
  /// Steps skipped for a non-finite gradient, and finite steps since the last change of scale.
  [[nodiscard]] long overflows() const { return overflows_; }
  [[nodiscard]] long good_steps() const { return good_; }

  /// After a step: an overflow shrinks the scale (not below min_scale) and restarts the count;
  /// growth_interval finite steps in a row grow it.
  void update(bool overflow) {
    if (overflow) {
      ++overflows_;
      good_ = 0;
      scale_ = std::max(o_.min_scale, scale_ * o_.backoff);
      return;
    }
    if (++good_ >= o_.growth_interval) {
      good_ = 0;
      scale_ *= o_.growth;
    }
  }

 private:
  Options o_;
  double scale_;
  long overflows_ = 0;
  long good_ = 0;
};

}  // namespace shardalg::nn
