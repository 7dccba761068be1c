// shardalg/nn/optim/sharded_adam.hpp — ZeRO-1 (Megatron's distributed optimizer): Adam whose moments
// are split over the data-parallel axis. Per gradient bucket b of n_b values (padded to a
// multiple of the dp size d):
//
//   dG_b[dp:Partial] → reduce_scatter<dp, C> → dG_b[dp:C]        each rank: n_b/d reduced values
//   P_b[dp:C] := Adam(P_b, dG_b; m_b[dp:C], v_b[dp:C])            only this rank's slice
//   P_b[dp:C] → all_gather<dp> → P_b[dp:R]                        every replica: the new values
//
// Traffic per step equals the all-reduce's (a ring all-reduce is a reduce-scatter then an
// all-gather); the moments shrink from 2Ψ to 2Ψ/d values per rank (Ψ: this tensor-parallel rank's
// parameters). state_bytes() is what this rank allocated, for the memory check against that formula.
// The update is Adam's kernel (OptimKernels::adam_n) on each slice, element for element the
// unsharded one, so with the same reduced gradients the parameters come out bitwise the same.
//
// 16-bit parameters (bf16, fp16) on the CPU: as Adam does, the moments and a master copy of the
// weights are fp32 — here only this rank's slice of each, so 12Ψ/d bytes of state per rank beside
// the 2Ψ weights and 2Ψ gradients. Each slice of the master is seeded from the weights where they
// are not its rounding (the first update, or a weight loaded from outside); the update runs on the
// master with the gradient slice widened, and the weights' slice is the master rounded.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "shardalg/nn/optim/grad_buckets.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

template <Element T, class B = CpuBackend>
class ShardedAdam {
  static constexpr bool mixed = HostHalf<T> && std::is_same_v<B, CpuBackend>;

 public:
  using Options = typename Adam<T, B>::Options;
  using Mat = typename B::template matrix<T>;
  /// The element type of the state: fp32 for 16-bit parameters (Adam's), T otherwise.
  using State = typename Adam<T, B>::State;
  using StateMat = typename B::template matrix<State>;

  explicit ShardedAdam(Options o = {}) : opt_(o) { (void)Adam<T, B>(o); }  // Adam checks the betas

  [[nodiscard]] const Options& options() const { return opt_; }
  void set_lr(double lr) { opt_.lr = lr; }
  void begin_step() { ++step_; }
  [[nodiscard]] long step_count() const { return step_; }
  void set_step_count(long t) { step_ = t; }

  /// Allocate this rank's slices for a plan on a dp group of size `d` (rank `r`); zero moments.
  void bind(const BucketPlan& plan, int d, int r) {
    d_ = d;
    r_ = r;
    m_.clear();
    v_.clear();
    master_.clear();
    for (Index n : plan.padded) {
      m_.push_back(StateMat::Zero(1, n / d));
      v_.push_back(StateMat::Zero(1, n / d));
      if constexpr (mixed) master_.push_back(StateMat::Zero(1, n / d));  // seeded at the first update
    }
    bound_ = true;
  }
  [[nodiscard]] bool bound() const { return bound_; }
  [[nodiscard]] int dp_size() const { return d_; }
  [[nodiscard]] int dp_rank() const { return r_; }

  /// The bytes of optimizer state this rank holds: its m and v slices (and the fp32 master's of a
  /// 16-bit model), as allocated.
  [[nodiscard]] std::size_t state_bytes() const {
    std::size_t n = 0;
    for (std::size_t b = 0; b < m_.size(); ++b)
      n += static_cast<std::size_t>(m_[b].size() + v_[b].size()) * sizeof(State);
    for (const auto& w : master_) n += static_cast<std::size_t>(w.size()) * sizeof(State);
    return n;
  }
  [[nodiscard]] const std::vector<StateMat>& m() const { return m_; }
  [[nodiscard]] const std::vector<StateMat>& v() const { return v_; }
  std::vector<StateMat>& m() { return m_; }
  std::vector<StateMat>& v() { return v_; }
  /// This rank's slices of the fp32 master (16-bit parameters; empty otherwise).
  [[nodiscard]] const std::vector<StateMat>& master() const { return master_; }
  std::vector<StateMat>& master() { return master_; }

  /// Adam on this rank's slice of bucket b: `p` and `g` are the slice's parameter values and
  /// reduced gradients. Each parameter's part of the slice gets its own weight decay (matrices
  /// only); the padding is left alone.
  void update_slice(std::size_t b, const BucketPlan& plan, T* p, const T* g, double scale) {
    if (step_ < 1) throw ShapeError("ShardedAdam: update before begin_step()");
    const Index len = plan.padded[b] / d_, lo = r_ * len, hi = lo + len;
    const double c1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step_));
    const double c2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step_));
    for (const auto& s : plan.slots) {
      if (s.bucket != b) continue;
      const Index a = std::max(lo, s.offset), e = std::min(hi, s.offset + s.size());
      if (a >= e) continue;
      const Index i = a - lo, n = e - a;
      const auto k = [&]<class S>(S* w, const S* grad) {
        OptimKernels<B>::template adam_n<S>(w, grad, m_[b].data() + i, v_[b].data() + i, n, S(scale), S(opt_.lr),
                                            S(opt_.beta1), S(opt_.beta2), S(opt_.eps),
                                            S(s.decay ? opt_.weight_decay : 0.0), S(c1), S(c2));
      };
      if constexpr (mixed) {
        State* w = master_[b].data() + i;
        bool seeded = true;
        for (Index j = 0; j < n && seeded; ++j) seeded = T(w[j]) == p[i + j];
        if (!seeded)
          for (Index j = 0; j < n; ++j) w[j] = static_cast<State>(p[i + j]);
        std::vector<State> gw(static_cast<std::size_t>(n));
        for (Index j = 0; j < n; ++j) gw[static_cast<std::size_t>(j)] = static_cast<State>(g[i + j]);
        k(w, gw.data());
        for (Index j = 0; j < n; ++j) p[i + j] = T(w[j]);
      } else {
        k(p + i, g + i);
      }
    }
  }

 private:
  Options opt_;
  long step_ = 0;
  int d_ = 1, r_ = 0;
  bool bound_ = false;
  std::vector<StateMat> m_, v_, master_;
};

/// The sharded update from this rank's gradient slices G_b[dp:C] (`gslice`, bucket by bucket):
///   ZeRO-3 (`param_slices`: W_b[dp:C], the parameters themselves)   updated in place, nothing gathered
///   ZeRO-1 (null)   the parameters packed by `visit_params` (f(info, map, w) in plan order), this
///                   rank's slice updated, W_b[dp:C] → all_gather<dp> → W_b[dp:R], unpacked back.
/// DataParallelGpt and PipelineGpt call it after their norm and clip factor `scale`; the caller opens
/// the ledger scope.
template <Element T, class B, class Slices, class VisitParams>
void sharded_update(ShardedAdam<T, B>& opt, const BucketPlan& plan, const Group& data, const std::vector<typename B::template matrix<T>>& gslice,
                    double scale, Slices* param_slices, VisitParams&& visit_params) {
  using Mat = typename B::template matrix<T>;
  if (param_slices) {
    for (std::size_t b = 0; b < plan.buckets(); ++b)
      opt.update_slice(b, plan, (*param_slices)[b].local().data(), gslice[b].data(), scale);
    return;
  }
  const int d = data.size(), r = data.rank();
  std::vector<Mat> params;
  for (Index n : plan.padded) params.push_back(Mat::Zero(1, n));
  std::size_t k = 0;
  visit_params([&](const ParamInfo&, const auto&, auto& w) {
    const auto& s = plan.slots[k++];
    pack(w.local(), s, params[s.bucket]);
  });
  std::vector<Mat> gathered(plan.buckets());
  for (std::size_t b = 0; b < plan.buckets(); ++b) {
    const Index len = plan.padded[b] / d;
    Mat mine = params[b].middleCols(r * len, len);
    opt.update_slice(b, plan, mine.data(), gslice[b].data(), scale);
    MeshSharded<T, Axes<On<dp, ColSharded>>, B> slice(std::move(mine), 1, plan.padded[b], {data});
    gathered[b] = all_gather<dp>(slice).local();  // → [dp:R]
  }
  k = 0;
  visit_params([&](const ParamInfo&, const auto&, auto& w) {
    const auto& s = plan.slots[k++];
    unpack(gathered[s.bucket], s, w.local());
  });
}

}  // namespace shardalg::nn
