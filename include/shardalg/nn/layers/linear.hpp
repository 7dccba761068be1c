// shardalg/nn/layers/linear.hpp — Megatron's two tensor-parallel linear layers (weights are [in, out],
// Y = X · W + b), with f and g at the boundaries.
//
// ColumnParallelLinear (W split by output columns, bias split with it):
//   forward   f: X[R] → X[R];  X[R] · W[C] → Y[C];  Y[C] + b[C] → Y[C]      (no communication)
//             optional gather: all_gather Y[C] → Y[R]
//   backward  dX = dY[C] · Wᵀ[Row] → dX[Partial];  f's adjoint: all_reduce → dX[R]
//             dW = Xᵀ[R] · dY[C] → dW[C];  db = col_sum(dY[C]) → db[C]     (local)
//   overlap   (Megatron's async dgrad, opt-in) dX first, start its all-reduce, then dW as
//             Σ_k X[k]ᵀ · dY[k] over token chunks, driving the all-reduce between chunks
//
// RowParallelLinear (W split by input rows, bias replicated, added once after the reduction):
//   forward   H[C] · W[Row] → Z[Partial];  g: all_reduce → Z[R];  Z[R] + b[R] → Z[R]
//             (input not yet parallel: split X[R] → X[C] first, free)
//   backward  g's adjoint: identity, dZ[R];  dH = dZ[R] · Wᵀ[C] → dH[C]
//             dW = Hᵀ[Row] · dZ[R] → dW[Row];  db = col_sum(dZ[R]) → db[R]  (local)
//             (split input: split's adjoint all_gather dH[C] → dX[R])
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "shardalg/backend/fused.hpp"
#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/conjugates.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/nn/layers/init.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

namespace detail {
/// Whether the backend folds a linear layer's bias into its GEMMs (nn::Fused<B>::gemm_bias and
/// gemm_wgrad_bgrad, each returning nothing when it does not apply): the CUDA backend's cuBLASLt
/// epilogues (backend/cuda/fused.cuh). Otherwise the layers run the GEMM, then the bias pass.
template <class T, class B>
concept FusedEpilogues = requires(const typename B::template matrix<T>& m) {
  Fused<B>::gemm_bias(m, m, m);
  Fused<B>::gemm_wgrad_bgrad(m, m);
};
using shardalg::detail::cat;

inline void require_divisible(std::string_view layer, std::string_view what, Index n, int p) {
  if (n % p != 0)
    throw DivisibilityError(cat(layer, ": ", what, " ", n, " is not divisible by tensor-parallel size ", p));
}
inline void require_cols(std::string_view layer, Index got, Index want) {
  if (got != want) throw ShapeError(cat(layer, ": input has ", got, " columns, expected ", want));
}
/// A dense master handed to from_dense: given exactly when the config wants it (`absent` says
/// why it must not be given), and of the shape the config implies. Checked before any is read.
template <class M>
void require_master(std::string_view where, std::string_view name, const M* m, bool wanted, Index rows, Index cols,
                    std::string_view absent = "the config has no bias") {
  if (!wanted) {
    if (m) throw ShapeError(cat(where, ": ", name, " is given but ", absent));
    return;
  }
  if (!m) throw ShapeError(cat(where, ": ", name, " is null, expected a ", rows, "x", cols, " matrix"));
  if (m->rows() != rows || m->cols() != cols)
    throw ShapeError(cat(where, ": ", name, " is ", m->rows(), "x", m->cols(), ", expected ", rows, "x", cols));
}
/// The Overlap::automatic decision: after one warm-up call, time the two schedules alternately
/// for `trials` calls each, take the maximum over ranks (one 2-value all-reduce, not counted by
/// the ledger: it is not the algebra's traffic) and keep the faster schedule from then on.
struct OverlapTuner {
  int trials = 3;
  int calls = 0;
  double total[2] = {0, 0};  // [sequential, overlapped] seconds
  int choice = -1;           // −1 undecided, 0 sequential, 1 overlapped

  [[nodiscard]] bool next_overlapped() const { return choice >= 0 ? choice == 1 : calls > 0 && calls % 2 == 0; }
  void record(bool overlapped, double seconds, Group g) {
    if (choice >= 0) return;
    if (calls > 0) total[overlapped ? 1 : 0] += seconds;
    if (++calls < 1 + 2 * trials) return;
    double t[2] = {total[0], total[1]};
    g.all_reduce(t, 2, ReduceOp::max, CallInfo{"calibration", "calibration", true});
    choice = t[1] < t[0] ? 1 : 0;
  }
};
/// Column map of an unfused weight.
struct IdentityMap {
  LogicalCol operator()(Index c) const { return {0, c}; }
};
/// What the two parallel linear layers share: W[in, out] and b[1, out] (in the layer's layouts),
/// the constructor's bias check, the accessors, and init/from_dense in terms of Layer::make.
template <class Layer, class Weight, class Bias>
class LinearParams {
 public:
  /// normal(0, std) weights keyed by (seed, tensor, row, col); zero bias.
  static Layer init(Index in, Index out, bool bias, const Group& g, NormalInit init, std::uint64_t tensor) {
    return Layer::make(in, out, bias, g, [&](Index i, Index j) { return init(tensor, i, j); }, [](Index) { return 0.0; });
  }
  /// Shard dense masters W[in, out] and b[1, out] (b may be null).
  template <class M>
  static Layer from_dense(const M& w, const M* b, const Group& g) {
    if (b) require_master("from_dense", "bias", b, true, 1, w.cols());  // checked before it is read
    return Layer::make(w.rows(), w.cols(), b != nullptr, g, [&](Index i, Index j) { return w(i, j); },
                       [&](Index j) { return (*b)(0, j); });
  }

  [[nodiscard]] Index in_features() const { return w_.rows(); }
  [[nodiscard]] Index out_features() const { return w_.cols(); }
  [[nodiscard]] const Weight& weight() const { return w_; }
  [[nodiscard]] const std::optional<Bias>& bias() const { return b_; }
  Weight& weight() { return w_; }
  std::optional<Bias>& bias() { return b_; }

 protected:
  LinearParams(Weight w, std::optional<Bias> b, std::string name)
      : w_(std::move(w)), b_(std::move(b)), name_(std::move(name)) {
    if (b_ && (b_->rows() != 1 || b_->cols() != w_.cols()))
      throw ShapeError(cat(name_, ": bias is ", b_->rows(), "x", b_->cols(), ", expected 1x", w_.cols()));
  }

  Weight w_;
  std::optional<Bias> b_;
  std::string name_;
};
}  // namespace detail

/// How ColumnParallelLinear::backward schedules f's all-reduce of dX against the weight-gradient
/// GEMM. `off`: dX, dW, then the all-reduce. `on`: dX, start the all-reduce, dW in `chunks`
/// GEMMs over token blocks with a progress call after each, wait. `automatic`: `on` and `off`
/// timed against each other on the first calls (OverlapTuner), the faster kept; `off` at once
/// when the group cannot start an all-reduce asynchronously (ThreadComm, SelfComm).
enum class Overlap { off, on, automatic };
struct OverlapConfig {
  Overlap mode = Overlap::off;
  int chunks = 4;
};

template <Element T, class B = CpuBackend>
class ColumnParallelLinear : public detail::LinearParams<ColumnParallelLinear<T, B>, Sharded<T, ColSharded, B>, Sharded<T, ColSharded, B>> {
  using Params = detail::LinearParams<ColumnParallelLinear<T, B>, Sharded<T, ColSharded, B>, Sharded<T, ColSharded, B>>;
  using Params::b_, Params::name_, Params::w_;

 public:
  using Weight = Sharded<T, ColSharded, B>;  // [in, out]
  using Bias = Sharded<T, ColSharded, B>;    // [1, out]
  using Input = Sharded<T, Replicated, B>;
  using Output = Sharded<T, ColSharded, B>;

  struct Cache {
    Input x;
  };
  struct Forward {
    Output y;
    Cache cache;
  };
  struct GatheredForward {
    Sharded<T, Replicated, B> y;
    Cache cache;
  };
  struct ParamGrads {
    Weight dw;
    std::optional<Bias> db;
  };
  /// dX before f's all-reduce: each rank's summand. Sum several of these (when X fed several
  /// column-parallel layers) and reduce once.
  struct PartialGrads {
    Sharded<T, Partial, B> dx;
    ParamGrads params;
  };
  struct Grads {
    Sharded<T, Replicated, B> dx;
    ParamGrads params;
  };

  ColumnParallelLinear(Weight w, std::optional<Bias> b, std::string name = "ColumnParallelLinear")
      : Params(std::move(w), std::move(b), std::move(name)) {}

  /// Weight element (i, j) := wf(i, j), bias element j := bf(j), at global (physical) indices.
  template <class WF, class BF>
  static ColumnParallelLinear make(Index in, Index out, bool bias, const Group& g, WF wf, BF bf,
                                   std::string name = "ColumnParallelLinear") {
    auto w = from_global<T, ColSharded, B>(in, out, g, wf);  // any out: balanced column blocks
    std::optional<Bias> b;
    if (bias) b = from_global<T, ColSharded, B>(1, out, g, [&](Index, Index j) { return bf(j); });
    return ColumnParallelLinear(std::move(w), std::move(b), std::move(name));
  }

  /// X[R] → Y[C].
  Forward forward(const Input& x) const {
    detail::require_cols(name_, x.cols(), w_.rows());
    Input xf = copy_to(x);  // f: identity forward
    if constexpr (detail::FusedEpilogues<T, B>)
      if (b_)  // X[R] · W[C] + b[C] → Y[C], the bias in the GEMM (a local product: no communication)
        if (auto y = Fused<B>::gemm_bias(xf.local(), w_.local(), b_->local()))
          return {Output(std::move(*y), x.rows(), w_.cols(), x.group()), Cache{std::move(xf)}};
    Output y = matmul(xf, w_);
    if (b_) y = add_bias(y, *b_);
    return {std::move(y), Cache{std::move(xf)}};
  }
  /// X[R] → X·W[C], the bias not yet added: a caller that fuses the bias into the next pass
  /// (nn::Mlp: bias + activation, backend/cpu/fused.hpp) adds bias() itself.
  Forward forward_unbiased(const Input& x) const {
    detail::require_cols(name_, x.cols(), w_.rows());
    Input xf = copy_to(x);  // f: identity forward
    Output y = matmul(xf, w_);
    return {std::move(y), Cache{std::move(xf)}};
  }
  /// X[R] → H = X·W + b[C] (the forward's y, kept for the backward) and A = act(H)[C] in one GEMM,
  /// when the backend folds bias and activation into its epilogue (nn::Fused<B>::gemm_bias_act: the
  /// CUDA backend, GeLU tanh). Otherwise the forward of forward_unbiased and no A: the caller adds
  /// the bias and activates (Fused::bias_act). X is copied (f) once either way.
  std::pair<Forward, std::optional<Output>> forward_bias_act(const Input& x, Activation act) const {
    detail::require_cols(name_, x.cols(), w_.rows());
    Input xf = copy_to(x);  // f: identity forward
    if constexpr (requires(const typename B::template matrix<T>& m) { Fused<B>::gemm_bias_act(m, m, m, act); })
      if (b_)
        if (auto o = Fused<B>::gemm_bias_act(xf.local(), w_.local(), b_->local(), act))
          return {Forward{Output(std::move(o->h), x.rows(), w_.cols(), x.group()), Cache{std::move(xf)}},
                  Output(std::move(o->a), x.rows(), w_.cols(), x.group())};
    (void)act;
    Output y = matmul(xf, w_);
    return {Forward{std::move(y), Cache{std::move(xf)}}, std::nullopt};
  }
  /// X[R] → Y[R] (gather_output): all_gather after the local product.
  GatheredForward forward_gathered(const Input& x) const {
    auto f = forward(x);
    return {all_gather(f.y), std::move(f.cache)};
  }

  /// dY[C] → dX[Partial] and the parameter gradients; no communication. `db`: the bias
  /// gradient col_sum(dY) when the caller computed it in its own pass (backend/cpu/fused.hpp).
  PartialGrads backward_partial(const Cache& c, const Output& dy, std::optional<Bias> db = std::nullopt) const {
    Sharded<T, Partial, B> dx = matmul(dy, transpose(w_));  // dY[C] · Wᵀ[Row] → Partial
    if constexpr (detail::FusedEpilogues<T, B>)
      if (b_ && !db)  // Xᵀ[R] · dY[C] → C and col_sum(dY) → C in one GEMM
        if (auto g = Fused<B>::gemm_wgrad_bgrad(c.x.local(), dy.local()))
          return {std::move(dx),
                  {Weight(std::move(g->dw), w_.rows(), w_.cols(), dy.group()), Bias(std::move(g->db), 1, w_.cols(), dy.group())}};
    Weight dw = matmul(transpose(c.x), dy);                  // Xᵀ[R] · dY[C] → C
    if (b_ && !db) db = col_sum(dy);  // C → C
    if (!b_) db.reset();
    return {std::move(dx), {std::move(dw), std::move(db)}};
  }
  /// dY[C] → dX[R]: f's adjoint all-reduces the Partial input gradient, overlapped with the
  /// weight-gradient GEMM when set_overlap asks for it. `db` as for backward_partial.
  Grads backward(const Cache& c, const Output& dy, std::optional<Bias> db = std::nullopt) const {
    Group g = dy.group();
    if (overlap_.mode == Overlap::automatic && tuner_.choice < 0 && (g.size() == 1 || !g.async_all_reduce()))
      tuner_.choice = 0;  // nothing to overlap with: sequential, no calibration
    if (g.size() == 1 || overlap_.mode == Overlap::off || (overlap_.mode == Overlap::automatic && tuner_.choice == 0))
      return backward_sequential(c, dy, std::move(db));
    if (overlap_.mode == Overlap::on) return backward_overlapped(c, dy, std::move(db));
    const bool overlapped = tuner_.next_overlapped();
    const auto t0 = std::chrono::steady_clock::now();
    Grads out = overlapped ? backward_overlapped(c, dy, std::move(db)) : backward_sequential(c, dy, std::move(db));
    tuner_.record(overlapped, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), g);
    return out;
  }
  /// The sequential schedule (Overlap::off): dX, dW, db, then f's adjoint all-reduces dX.
  Grads backward_sequential(const Cache& c, const Output& dy, std::optional<Bias> db = std::nullopt) const {
    auto pg = backward_partial(c, dy, std::move(db));
    return {adjoint::copy_to(std::move(pg.dx)), std::move(pg.params)};
  }
  /// The overlap schedule (Overlap::on, whatever the group):
  ///   dX = dY[C] · Wᵀ[Row] → Partial;  start all_reduce → dX[R]   (f's adjoint, in flight)
  ///   dW = Σ_k X[k]ᵀ[R] · dY[k][C] → C, k over `chunks` token blocks, test() after each
  ///   db = col_sum(dY[C]);  wait → dX[R]
  Grads backward_overlapped(const Cache& c, const Output& dy, std::optional<Bias> db = std::nullopt) const {
    auto pending = all_reduce_start(Sharded<T, Partial, B>(matmul(dy, transpose(w_))));
    const Index m = dy.rows(), step = std::max<Index>(1, (m + overlap_.chunks - 1) / overlap_.chunks);
    auto xt = B::view(c.x.local(), true);  // Xᵀ: [in, m]
    auto vdy = B::view(dy.local());        // dY's block: [m, out/P]
    auto dw = m == 0 ? B::template zeros<T>(w_.rows(), dy.local().cols()) : B::template empty<T>(w_.rows(), dy.local().cols());
    for (Index k0 = 0; k0 < m; k0 += step) {
      const Index len = std::min(step, m - k0);
      B::gemm(T(1), xt.slice_cols(k0, len), vdy.slice_rows(k0, len), k0 == 0 ? T(0) : T(1), dw);
      pending.test();
    }
    if (b_ && !db) db = col_sum(dy);
    if (!b_) db.reset();
    return {std::move(pending).wait(), {Weight(std::move(dw), w_.rows(), w_.cols(), dy.group()), std::move(db)}};
  }
  void set_overlap(OverlapConfig o) {
    if (o.chunks < 1) throw ShapeError(detail::cat(name_, ": overlap chunks ", o.chunks, " must be at least 1"));
    overlap_ = o;
    tuner_ = {};
  }
  [[nodiscard]] OverlapConfig overlap() const { return overlap_; }
  /// Overlap::automatic's decision so far: nullopt while calibrating (or in another mode).
  [[nodiscard]] std::optional<bool> overlap_chosen() const {
    if (overlap_.mode != Overlap::automatic || tuner_.choice < 0) return std::nullopt;
    return tuner_.choice == 1;
  }
  /// Backward of forward_gathered: all_gather's adjoint on an R cotangent is split (free).
  Grads backward_gathered(const Cache& c, const Sharded<T, Replicated, B>& dy) const {
    return backward(c, adjoint::all_gather<ColSharded>(dy));
  }

  void sgd(const ParamGrads& g, T lr) {
    sgd_update(w_, g.dw, lr);
    if (b_) sgd_update(*b_, *g.db, lr);
  }

 private:
  OverlapConfig overlap_;
  mutable detail::OverlapTuner tuner_;
};

template <Element T, class B = CpuBackend>
class RowParallelLinear : public detail::LinearParams<RowParallelLinear<T, B>, Sharded<T, RowSharded, B>, Sharded<T, Replicated, B>> {
  using Params = detail::LinearParams<RowParallelLinear<T, B>, Sharded<T, RowSharded, B>, Sharded<T, Replicated, B>>;
  using Params::b_, Params::name_, Params::w_;

 public:
  using Weight = Sharded<T, RowSharded, B>;  // [in, out]
  using Bias = Sharded<T, Replicated, B>;    // [1, out]
  using Input = Sharded<T, ColSharded, B>;
  using Output = Sharded<T, Replicated, B>;

  struct Cache {
    Input h;
  };
  struct Forward {
    Output z;
    Cache cache;
  };
  struct PartialForward {
    Sharded<T, Partial, B> z;  // before g and before the bias
    Cache cache;
  };
  struct ParamGrads {
    Weight dw;
    std::optional<Bias> db;
  };
  struct Grads {
    Input dh;  // dH[C]
    ParamGrads params;
  };
  struct SplitGrads {
    Sharded<T, Replicated, B> dx;  // after split's adjoint (all_gather)
    ParamGrads params;
  };

  RowParallelLinear(Weight w, std::optional<Bias> b, std::string name = "RowParallelLinear")
      : Params(std::move(w), std::move(b), std::move(name)) {}

  template <class WF, class BF>
  static RowParallelLinear make(Index in, Index out, bool bias, const Group& g, WF wf, BF bf,
                                std::string name = "RowParallelLinear") {
    auto w = from_global<T, RowSharded, B>(in, out, g, wf);  // any in: balanced row blocks
    std::optional<Bias> b;
    if (bias) b = from_global<T, Replicated, B>(1, out, g, [&](Index, Index j) { return bf(j); });
    return RowParallelLinear(std::move(w), std::move(b), std::move(name));
  }

  /// H[C] → Z[R]: local product (Partial), g's all-reduce, then the bias once.
  Forward forward(const Input& h) const {
    auto f = forward_partial(h);
    Output z = reduce_from(std::move(f.z));  // g
    return {add_output_bias(std::move(z)), std::move(f.cache)};
  }
  /// H[C] → Z[Partial]: the local product only, before g and before the bias. The caller
  /// finishes it (all_reduce → R, or reduce_scatter → Row under sequence parallelism) and then
  /// adds the bias with add_output_bias. backward takes the finished cotangent dZ[R].
  PartialForward forward_partial(const Input& h) const {
    detail::require_cols(name_, h.cols(), w_.rows());
    return {matmul(h, w_), Cache{h}};  // H[C] · W[Row] → Partial
  }
  /// Z[R] or Z[Row] + b[R], once, after the reduction (no-op without a bias).
  template <class L>
  Sharded<T, L, B> add_output_bias(Sharded<T, L, B> z) const {
    if (b_) z = add_bias(z, *b_);
    return z;
  }
  /// X[R] → Z[R] (input_is_parallel = false): split is a free local slice.
  Forward forward_split(const Sharded<T, Replicated, B>& x) const {
    detail::require_cols(name_, x.cols(), w_.rows());
    return forward(split<ColSharded>(x));
  }

  Grads backward(const Cache& c, const Output& dz) const {
    Output dzr = adjoint::reduce_from(dz);                  // g's adjoint: identity
    Input dh = matmul(dzr, transpose(w_));                   // dZ[R] · Wᵀ[C] → C
    if constexpr (detail::FusedEpilogues<T, B>)
      if (b_)  // Hᵀ[Row] · dZ[R] → Row and col_sum(dZ) → R in one GEMM
        if (auto g = Fused<B>::gemm_wgrad_bgrad(c.h.local(), dzr.local()))
          return {std::move(dh),
                  {Weight(std::move(g->dw), w_.rows(), w_.cols(), dz.group()), Bias(std::move(g->db), 1, w_.cols(), dz.group())}};
    Weight dw = matmul(transpose(c.h), dzr);                 // Hᵀ[Row] · dZ[R] → Row
    std::optional<Bias> db;
    if (b_) db = col_sum(dzr);  // R → R: every rank holds the whole gradient
    return {std::move(dh), {std::move(dw), std::move(db)}};
  }
  SplitGrads backward_split(const Cache& c, const Output& dz) const {
    auto g = backward(c, dz);
    return {adjoint::split(g.dh), std::move(g.params)};
  }

  void sgd(const ParamGrads& g, T lr) {
    sgd_update(w_, g.dw, lr);
    if (b_) sgd_update(*b_, *g.db, lr);
  }
};

}  // namespace shardalg::nn
