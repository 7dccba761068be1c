// shardalg/nn/optim/optim.hpp — the parameter update, where the gradient's layout is checked once more.
//
//   sgd_update(W[L], dW[L], lr)        W := W − lr·dW, locally (the shards line up)
//   sgd_update(γ[R], dγ[Partial], lr)  compile error E130: the gradient still holds per-rank
//                                      summands (e.g. a LayerNorm weight on row-sharded tokens);
//                                      all_reduce it first
//   sgd_update(W[C], dW[Row], lr)      compile error E131: the layouts differ
//
// Optimizers with state sharded like the parameter. Each rank keeps, per parameter, a
// state block the shape of its *local* block: a ColSharded weight's Adam moments are ColSharded,
// a replicated norm weight's are replicated (every rank updates its copy identically). The update
// is elementwise, so no communication: `Sgd` (momentum, weight decay) and `Adam` (AdamW's
// decoupled weight decay, bias correction). Their `update(info, W, dW, scale)` refuses Partial
// gradients (E130) and mismatched layouts (E131) exactly like sgd_update.
//
// Gradient clipping by the global norm ‖g‖ = √(Σ_params Σ_elements g²) of the *logical* model:
//   sharded (Row, C) gradients: each rank sums its block; the blocks partition the tensor
//   replicated (R) gradients: every rank holds the same whole tensor; counted once, not P times
//   replicated columns inside a sharded tensor (grouped-query K/V copies): weighted 1/copies
//   Partial: compile error E130 (a pending sum has no norm until reduced)
// One all_reduce of one scalar (the sharded sum) per step; the replicated sum is added after it,
// locally, so every rank gets the same norm, equal to the TP=1 norm up to summation order.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/core/cast.hpp"
#include "shardalg/core/elementwise.hpp"

namespace shardalg::nn {

template <class T, class LP, class LG, class B>
auto sgd_update(Sharded<T, LP, B>& param, const Sharded<T, LG, B>& grad, T lr) {
  if constexpr (std::is_same_v<LG, Partial>) {
    return diagnose<Diag::update_partial_grad, LG>();
  } else if constexpr (!std::is_same_v<LP, LG>) {
    return diagnose<Diag::update_layout, LG>();
  } else {
    param = param - lr * grad;  // shape and group checked by the subtraction
  }
}

/// What an optimizer (and a checkpoint) knows about one parameter besides its two tensors.
struct ParamInfo {
  std::string name;  // e.g. "layers.0.attn.qkv.weight"
  bool decay = false;  // weight decay applies (matrices; not biases or norm weights)
  /// Global column → weight in the global norm (null: 1). Grouped-query attention with fewer
  /// groups than ranks stores each K/V column on P/groups ranks: 1/(P/groups) there.
  std::function<double(Index)> col_weight;
};

/// Local kernels of the optimizers (a backend specialises this; the CPU one is below).
template <class Backend>
struct OptimKernels;

template <>
struct OptimKernels<CpuBackend> {
  template <class T>
  using M = CpuBackend::matrix<T>;

  /// Σ w(c0 + j)·x_ij², accumulated in double.
  template <class T>
  static double sum_squares(const M<T>& x, Index c0, const std::function<double(Index)>& w) {
    double s = 0;
    for (Index j = 0; j < x.cols(); ++j) {
      double c = 0;
      for (Index i = 0; i < x.rows(); ++i) c += static_cast<double>(x(i, j)) * static_cast<double>(x(i, j));
      s += w ? w(c0 + j) * c : c;
    }
    return s;
  }
  /// SGD with momentum μ and decoupled weight decay λ: g' = s·g; v := μv + g'; p := p − lr(v + λp).
  template <class T>
  static void sgd(M<T>& p, const M<T>& g, M<T>* v, T scale, T lr, T mu, T wd) {
    if (v) {
      v->array() = mu * v->array() + scale * g.array();
      p.array() -= lr * (v->array() + wd * p.array());
    } else {
      p.array() -= lr * (scale * g.array() + wd * p.array());
    }
  }
  /// Adam(W): g' = s·g; m := β1 m + (1−β1)g'; v := β2 v + (1−β2)g'²;
  /// p := p − lr(m/(1−β1ᵗ) / (√(v/(1−β2ᵗ)) + ε) + λp).
  template <class T>
  static void adam(M<T>& p, const M<T>& g, M<T>& m, M<T>& v, T scale, T lr, T b1, T b2, T eps, T wd, T c1, T c2) {
    adam_n(p.data(), g.data(), m.data(), v.data(), p.size(), scale, lr, b1, b2, eps, wd, c1, c2);
  }
  /// The same on n contiguous elements (the sharded optimizer updates a slice of a flat bucket).
  template <class T>
  static void adam_n(T* p, const T* g, T* m, T* v, Index n, T scale, T lr, T b1, T b2, T eps, T wd, T c1, T c2) {
    for (Index i = 0; i < n; ++i) {
      const T gi = scale * g[i];
      T& mi = m[i];
      T& vi = v[i];
      mi = b1 * mi + (T(1) - b1) * gi;
      vi = b2 * vi + (T(1) - b2) * gi * gi;
      const T mhat = mi / c1, vhat = vi / c2;
      p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
    }
  }
};

namespace detail {
template <class LP, class LG>
constexpr bool update_ok = !std::is_same_v<LG, Partial> && std::is_same_v<LP, LG>;

template <class LP, class LG>
constexpr auto update_diag() {
  if constexpr (std::is_same_v<LG, Partial>) return diagnose<Diag::update_partial_grad, LG>();
  else return diagnose<Diag::update_layout, LG>();
}
}  // namespace detail

/// Accumulates the squared global gradient norm; `finish` does the one scalar all-reduce.
class GradNorm {
 public:
  template <class T, class L, class B>
  auto add(const ParamInfo& info, const Sharded<T, L, B>& g) {
    if constexpr (std::is_same_v<L, Partial>) {
      return diagnose<Diag::update_partial_grad, L>();  // reduce first: a pending sum has no norm
    } else {
      if (!group_.valid()) group_ = g.group();
      const double s = OptimKernels<B>::template sum_squares<T>(g.local(), g.col_offset(), info.col_weight);
      if constexpr (WholeLayout<L>) replicated_ += s;  // whole on every rank (R, I): once
      else sharded_ += s;                                             // a block: summed over ranks
    }
  }
  /// √(Σ_ranks sharded + replicated): one all_reduce of one value (scope "grad_norm").
  double finish() { return std::sqrt(squares()); }
  /// The same for parameters split over `outer` as well (the pipeline's stages, each rank holding
  /// other parameters): then one more all_reduce of one value on `outer`.
  double finish(const Group& outer) {
    double s = squares();
    if (outer.size() > 1) {
      Group o = outer;
      o.all_reduce(&s, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
    }
    return std::sqrt(s);
  }

 private:
  /// Σ_ranks sharded + replicated (the all_reduce over the gradients' group).
  double squares() {
    double s = sharded_;
    if (group_.valid() && group_.size() > 1) {
      auto sc = shardalg::scope(group_, "grad_norm");
      group_.all_reduce(&s, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
    }
    return s + replicated_;
  }

  double sharded_ = 0, replicated_ = 0;
  Group group_;
};

/// The factor that clips a gradient of global norm `norm` to `max_norm` (1 when max_norm ≤ 0 or
/// the norm is within it): Megatron's max_norm / (norm + 1e-6).
inline double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

/// SGD with optional momentum and decoupled weight decay; the momentum buffer of each parameter
/// is a block the shape of the parameter's local block.
template <Element T, class B = CpuBackend>
class Sgd {
 public:
  using Mat = typename B::template matrix<T>;
  struct Options {
    double lr = 0.1;
    double momentum = 0.0;
    double weight_decay = 0.0;
  };
  explicit Sgd(Options o = {}) : opt_(o) {}

  [[nodiscard]] const Options& options() const { return opt_; }
  void set_lr(double lr) { opt_.lr = lr; }
  void begin_step() { ++step_; }
  [[nodiscard]] long step_count() const { return step_; }
  [[nodiscard]] const std::map<std::string, Mat>& state() const { return v_; }
  std::map<std::string, Mat>& state() { return v_; }

  /// W := W − lr·(v + λW) with v := μv + scale·dW. Partial dW: E130; other layout: E131. An fp32
  /// gradient of a 16-bit W (an accumulated main_grad) is rounded to W's type once: SGD keeps no
  /// fp32 master (Adam does).
  template <class LP, class LG, class G>
  auto update(const ParamInfo& info, Sharded<T, LP, B>& w, const Sharded<G, LG, B>& g, double scale = 1.0) {
    static_assert(std::is_same_v<G, T> || (HostHalf<T> && std::is_same_v<G, float>),
                  "shardalg: Sgd::update takes a gradient of the parameter's type (or fp32 for a 16-bit one)");
    if constexpr (!detail::update_ok<LP, LG>) {
      return detail::update_diag<LP, LG>();
    } else if constexpr (!std::is_same_v<G, T>) {
      return update(info, w, cast<T>(g), scale);
    } else {
      check_shape(info, w, g);
      Mat* v = nullptr;
      if (opt_.momentum != 0.0) {
        auto it = v_.find(info.name);
        if (it == v_.end()) it = v_.emplace(info.name, B::template zeros<T>(w.local_rows(), w.local_cols())).first;
        v = &it->second;
      }
      OptimKernels<B>::template sgd<T>(w.local(), g.local(), v, T(scale), T(opt_.lr), T(opt_.momentum),
                                       T(info.decay ? opt_.weight_decay : 0.0));
    }
  }

 private:
  template <class LP>
  static void check_shape(const ParamInfo& info, const Sharded<T, LP, B>& w, const Sharded<T, LP, B>& g) {
    if (w.rows() != g.rows() || w.cols() != g.cols())
      throw ShapeError(shardalg::detail::cat("Sgd: gradient of ", info.name, " is ", g.rows(), "x", g.cols(),
                                             ", parameter is ", w.rows(), "x", w.cols()));
  }
  Options opt_;
  long step_ = 0;
  std::map<std::string, Mat> v_;
};

/// Adam (AdamW with weight_decay > 0): the two moments of each parameter are blocks the shape of
/// its local block, so a sharded parameter's optimizer state is sharded the same way.
///
/// 16-bit parameters (bf16, fp16) on the CPU train in mixed precision: the moments and a master
/// copy of each weight are fp32 (2 + 2 + 12 bytes per parameter with the 16-bit gradient); the
/// update runs on the master with the gradient widened, and the weight is the master rounded. A
/// weight changed from outside (a load) re-seeds its master at the next update.
template <Element T, class B = CpuBackend>
class Adam {
  static constexpr bool mixed = HostHalf<T> && std::is_same_v<B, CpuBackend>;

 public:
  using Mat = typename B::template matrix<T>;
  /// The element type of the state: fp32 for 16-bit parameters, T otherwise.
  using State = std::conditional_t<mixed, float, T>;
  using StateMat = typename B::template matrix<State>;
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
  };
  struct Moments {
    StateMat m, v;
    StateMat master;  // the fp32 weight of a 16-bit parameter; empty otherwise
  };
  explicit Adam(Options o = {}) : opt_(o) {
    if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
      throw ShapeError(shardalg::detail::cat("Adam: betas (", o.beta1, ", ", o.beta2, ") must be in [0, 1)"));
  }

  [[nodiscard]] const Options& options() const { return opt_; }
  void set_lr(double lr) { opt_.lr = lr; }
  /// Advance the step counter t (bias correction); call once per step, before the updates.
  void begin_step() { ++step_; }
  [[nodiscard]] long step_count() const { return step_; }
  void set_step_count(long t) { step_ = t; }
  [[nodiscard]] const std::map<std::string, Moments>& state() const { return state_; }
  std::map<std::string, Moments>& state() { return state_; }

  /// One Adam update of W with scale·dW. Partial dW: E130; other layout: E131. A 16-bit W also
  /// takes an fp32 dW (an accumulated main_grad), which reaches the fp32 master unrounded.
  template <class LP, class LG, class G>
  auto update(const ParamInfo& info, Sharded<T, LP, B>& w, const Sharded<G, LG, B>& g, double scale = 1.0) {
    static_assert(std::is_same_v<G, T> || (mixed && std::is_same_v<G, float>),
                  "shardalg: Adam::update takes a gradient of the parameter's type (or fp32 for a 16-bit one)");
    if constexpr (!detail::update_ok<LP, LG>) {
      return detail::update_diag<LP, LG>();
    } else {
      if (w.rows() != g.rows() || w.cols() != g.cols())
        throw ShapeError(shardalg::detail::cat("Adam: gradient of ", info.name, " is ", g.rows(), "x", g.cols(),
                                               ", parameter is ", w.rows(), "x", w.cols()));
      if (step_ < 1) throw ShapeError("Adam: update before begin_step()");
      auto it = state_.find(info.name);
      if (it == state_.end())
        it = state_
                 .emplace(info.name, Moments{B::template zeros<State>(w.local_rows(), w.local_cols()),
                                             B::template zeros<State>(w.local_rows(), w.local_cols()), StateMat()})
                 .first;
      const double c1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step_));
      const double c2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step_));
      const auto k = [&](auto& p, const auto& grad) {
        using S = typename std::decay_t<decltype(p)>::Scalar;
        OptimKernels<B>::template adam<S>(p, grad, it->second.m, it->second.v, S(scale), S(opt_.lr), S(opt_.beta1),
                                          S(opt_.beta2), S(opt_.eps), S(info.decay ? opt_.weight_decay : 0.0), S(c1),
                                          S(c2));
      };
      if constexpr (mixed) {
        StateMat& master = it->second.master;
        if (master.rows() != w.local_rows() || master.cols() != w.local_cols() ||
            !(master.template cast<T>().array() == w.local().array()).all())
          master = w.local().template cast<float>();
        k(master, g.local().template cast<float>().eval());
        w.local() = master.template cast<T>();
      } else {
        k(w.local(), g.local());
      }
    }
  }

 private:
  Options opt_;
  long step_ = 0;
  std::map<std::string, Moments> state_;
};

}  // namespace shardalg::nn
