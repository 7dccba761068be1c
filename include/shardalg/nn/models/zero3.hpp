// shardalg/nn/models/zero3.hpp — ZeRO-3's parameter slices (DataParallelGpt's Options::shard_parameters,
// nn/models/data_parallel.hpp). The parameters are packed into the gradient buckets' flat layout
// (nn/optim/grad_buckets.hpp: the same buckets, each padded to a multiple of the data group's size
// D), and a rank keeps only its columns of each bucket:
//
//   W_b[dp:R]   (1 × n_b padded, this tp rank's local blocks side by side)
//     split<dp, C>          → W_b[dp:C]   this rank's n_b/D values: what it holds between steps (free)
//     all_gather<dp>        → W_b[dp:R]   a unit's buckets where the run needs them (gather_unit:
//                                         the buckets never span units), unpacked into the replica's
//                                         parameters W[tp:L], each bucket dropped before the next
//     release_unit(u)       a block's parameters freed after its forward (gathered again for its backward)
//     release(slot)         the replica's copy of one parameter is freed when its gradient has been
//                           handed over in the backward (it is not read again in this step)
//
// The optimizer (ShardedAdam::update_slice) updates W_b[dp:C] in place with G_b[dp:C]; nothing is
// gathered after the step — the next forward gathers. Between steps a replica's parameters keep
// their shapes and groups (rows, cols, tp group: what a checkpoint's remap needs) but no values:
// their local blocks are 0 × 0, and using one then is an error of the caller that the bucketed
// model finds only at run time.
//
// FullyShardedParam (below) is one ZeRO-3 parameter in the types, FSDP2's fully_shard of one
// tensor: W[tp:L, dp:Row] between uses, unshard(w) → W[tp:L] just before one, and its gradient
// reduce-scattered back. Used in place of W[tp:L] — a layer's weight, a matmul operand, view<tp> —
// it is the compile error E166.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "shardalg/mesh/collectives.hpp"
#include "shardalg/nn/optim/grad_buckets.hpp"

namespace shardalg::nn {

template <Element T, class B = CpuBackend>
class ParamShards {
 public:
  using Mat = typename B::template matrix<T>;
  using Slice = MeshSharded<T, Axes<On<dp, ColSharded>>, B>;  // W_b[dp:C]

  /// True once shard() has run: the slices are the parameters' values.
  [[nodiscard]] bool active() const { return !slices_.empty(); }
  /// True while the replica holds whole parameters (between gather() and the last release).
  [[nodiscard]] bool gathered() const { return live_ > 0; }
  [[nodiscard]] std::vector<Slice>& slices() { return slices_; }
  [[nodiscard]] const std::vector<Slice>& slices() const { return slices_; }

  /// The bytes of this rank's slices: e·Σ n_b/D.
  [[nodiscard]] std::size_t slice_bytes() const {
    std::size_t n = 0;
    for (const auto& s : slices_) n += static_cast<std::size_t>(s.local().size()) * sizeof(T);
    return n;
  }
  /// The most parameter bytes held (slices, the replica's parameters, the bucket in flight) since
  /// reset_peak().
  [[nodiscard]] std::size_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = 0; }

  /// W_b[dp:R] → split<dp, C> → W_b[dp:C] for every bucket of the replica's whole parameters, then
  /// release them all. No communication: every rank of the data group holds the same W[dp:R].
  template <class Model>
  void shard(Model& model, const BucketPlan& plan, const Group& data) {
    std::vector<Mat> flat;
    for (Index n : plan.padded) flat.push_back(Mat::Zero(1, n));  // zeros in the padding
    std::size_t k = 0;
    model.visit_params([&](const ParamInfo&, const auto&, auto& w) {
      const auto& s = plan.slots[k++];
      pack(w.local(), s, flat[s.bucket]);
    });
    slices_.clear();
    for (std::size_t b = 0; b < plan.buckets(); ++b) {
      MeshSharded<T, Axes<On<dp, Replicated>>, B> whole(std::move(flat[b]), 1, plan.padded[b], {data});
      slices_.push_back(split<dp, ColSharded>(whole));
    }
    bind(model, plan);
    live_ = plan.slots.size();
    held_ = 0;
    for (const auto& sl : plan.slots) held_ += static_cast<std::size_t>(sl.size()) * sizeof(T);
    release_all();
  }

  /// Every unit at once (masters(): the whole replica): W_b[dp:C] → all_gather<dp> → W_b[dp:R],
  /// bucket by bucket, unpacked into the replica's parameters.
  template <class Model>
  void gather(Model& model, const BucketPlan& plan) {
    begin(model, plan);
    for (std::size_t b = 0; b < plan.buckets(); ++b) gather_bucket(plan, b);
  }

  /// Start a step: find the replica's parameters (all still released). gather_unit may follow.
  template <class Model>
  void begin(Model& model, const BucketPlan& plan) {
    bind(model, plan);
    held_ = 0;
  }
  /// True while unit u's parameters are whole in the replica.
  [[nodiscard]] bool holds(const BucketPlan& plan, std::size_t u) const {
    for (std::size_t k = 0; k < plan.slots.size(); ++k)
      if (plan.slots[k].unit == u && plan.slots[k].size() > 0) return locals_[k]->size() > 0;
    return false;
  }
  /// Unit u's buckets: W_b[dp:C] → all_gather<dp> → W_b[dp:R] → its parameters (nothing when held).
  void gather_unit(const BucketPlan& plan, std::size_t u) {
    if (holds(plan, u)) return;
    for (std::size_t b = 0; b < plan.buckets(); ++b)
      if (plan.units[b] == u) gather_bucket(plan, b);
  }
  /// Free unit u's parameters (they are gathered again where needed).
  void release_unit(const BucketPlan& plan, std::size_t u) {
    for (std::size_t k = 0; k < plan.slots.size(); ++k)
      if (plan.slots[k].unit == u) release(k);
  }

  /// Free the replica's copy of parameter `slot` (its shape and group stay).
  void release(std::size_t slot) {
    if (slot >= locals_.size() || locals_[slot]->size() == 0) return;
    held_ -= static_cast<std::size_t>(locals_[slot]->size()) * sizeof(T);
    *locals_[slot] = Mat();
    --live_;
  }
  /// Free every parameter the replica still holds, and forget where they live.
  void release_all() {
    for (std::size_t k = 0; k < locals_.size(); ++k) release(k);
    locals_.clear();
    live_ = 0;
    held_ = 0;
  }

 private:
  /// One bucket: all_gather<dp> its slice, unpack its parameters (their blocks reallocated), drop it.
  void gather_bucket(const BucketPlan& plan, std::size_t b) {
    const Mat whole = all_gather<dp>(slices_[b]).local();  // W_b[dp:C] → W_b[dp:R]
    for (std::size_t k = 0; k < plan.slots.size(); ++k) {
      const auto& s = plan.slots[k];
      if (s.bucket != b) continue;
      locals_[k]->resize(s.rows, s.cols);
      unpack(whole, s, *locals_[k]);
      if (s.size() > 0) ++live_;
      held_ += static_cast<std::size_t>(s.size()) * sizeof(T);
    }
    peak_ = std::max(peak_, slice_bytes() + held_ + static_cast<std::size_t>(whole.size()) * sizeof(T));
  }

  /// The replica's parameters' local blocks, in plan order (valid while the model stays where it is:
  /// bound at every gather and shard, forgotten at release_all).
  template <class Model>
  void bind(Model& model, const BucketPlan& plan) {
    locals_.clear();
    model.visit_params([&](const ParamInfo&, const auto&, auto& w) { locals_.push_back(&w.local()); });
    if (locals_.size() != plan.slots.size())
      throw ShapeError("ParamShards: the model's parameters do not match the bucket plan");
  }

  std::vector<Slice> slices_;
  std::vector<Mat*> locals_;
  std::size_t live_ = 0;  // parameters the replica holds whole
  std::size_t held_ = 0;  // their bytes
  std::size_t peak_ = 0;
};

/// ZeRO-3's parameter between uses, in the types: W[tp:L, dp:Row]. The tensor-parallel block a
/// layer takes, W[tp:L], with its rows split once more over the data group (balanced blocks,
/// base/blocks.hpp); dp is the inner split, so gathering it is allowed (E161 refuses an outer one,
/// PyTorch's wrong full_tensor under TP + FSDP). A rank holds 1/D of its tensor-parallel block.
///
///   W[tp:L]                 shard(w, data): free, every replica holds the same W, each keeps its rows
///   W[tp:L, dp:Row]         between uses: this type; in place of a W[tp:L] it is E166
///     all_gather<dp>      → W[tp:L, dp:R] → view<tp> → W[tp:L]     unshard(w), just before the use
///   dW[tp:L, dp:Partial]    one replica's gradient, a summand of the batch's
///     reduce_scatter<dp>  → dW[tp:L, dp:Row]                        reduce_scatter_grad(w, dw)
///
/// The bucketed ZeRO-3 of DataParallelGpt (ParamShards above) packs many parameters into one
/// flat slice per bucket and does not use this type.
template <Element T, Layout L, class B = CpuBackend>
class FullyShardedParam {
 public:
  using Shard = MeshSharded<T, Axes<On<tp, L>, On<dp, RowSharded>>, B>;  // W[tp:L, dp:Row]
  using Whole = Sharded<T, L, B>;                                         // W[tp:L]

  FullyShardedParam() = default;
  explicit FullyShardedParam(Shard s) : shard_(std::move(s)) {}

  /// W[tp:L] → W[tp:L, dp:Row] on the data group `data`: each rank keeps its balanced block of the
  /// rows of its tensor-parallel block (no communication).
  static FullyShardedParam shard(const Whole& w, const Group& data) {
    MeshSharded<T, Axes<On<tp, L>, On<dp, Replicated>>, B> whole(w.local(), w.rows(), w.cols(), {w.group(), data});
    return FullyShardedParam(shardalg::split<dp, RowSharded>(whole));
  }

  [[nodiscard]] const Shard& sharded() const { return shard_; }
  [[nodiscard]] Shard& sharded() { return shard_; }
  [[nodiscard]] Index rows() const { return shard_.rows(); }
  [[nodiscard]] Index cols() const { return shard_.cols(); }
  /// The bytes this rank holds between uses.
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(shard_.local().size()) * sizeof(T); }

  /// Not a W[tp:L]: [shardalg.E166] where a layer's weight or any Sharded is expected.
  template <Layout To>
  operator Sharded<T, To, B>() const {  // NOLINT: implicit, so the mistake meets the diagnostic
    require<Diag::zero3_param_sharded, false, To>();
    return {};
  }

 private:
  Shard shard_;
};

/// W[tp:L, dp:Row] → all_gather<dp> → W[tp:L, dp:R] → view<tp> → W[tp:L]: the whole tensor-parallel
/// block, what a layer takes. One all_gather over the data group; drop the result after the use.
template <Element T, Layout L, class B>
Sharded<T, L, B> unshard(const FullyShardedParam<T, L, B>& w) {
  return shardalg::view<tp>(shardalg::all_gather<dp>(w.sharded()));
}

/// The gradient of an unsharded use back to the parameter's layout: dW[tp:L] is this replica's
/// summand of the batch's gradient, dW[tp:L, dp:Partial] → reduce_scatter<dp, Row> →
/// dW[tp:L, dp:Row], this rank's rows of the sum (the adjoint of unshard's all_gather).
template <Element T, Layout L, class B>
typename FullyShardedParam<T, L, B>::Shard reduce_scatter_grad(const FullyShardedParam<T, L, B>& w,
                                                              const Sharded<T, L, B>& dw) {
  const Group& data = w.sharded().template group<dp>();
  MeshSharded<T, Axes<On<tp, L>, On<dp, Partial>>, B> summand(dw.local(), dw.rows(), dw.cols(), {dw.group(), data});
  return shardalg::reduce_scatter<dp, RowSharded>(summand);
}

}  // namespace shardalg::nn

namespace shardalg {

/// [shardalg.E166]: a FullyShardedParam is not a matmul operand or a tensor on tp until unshard.
template <class X, class T, class L, class B>
auto matmul(const X&, const nn::FullyShardedParam<T, L, B>&) {
  return diagnose<Diag::zero3_param_sharded, X, L>();
}
template <class T, class L, class B, class Y>
auto matmul(const nn::FullyShardedParam<T, L, B>&, const Y&) {
  return diagnose<Diag::zero3_param_sharded, L, Y>();
}
template <class T, class L, class B, class T2, class L2, class B2>
auto matmul(const nn::FullyShardedParam<T, L, B>&, const nn::FullyShardedParam<T2, L2, B2>&) {
  return diagnose<Diag::zero3_param_sharded, L, L2>();
}
template <MeshAxis A, class T, class L, class B>
auto view(const nn::FullyShardedParam<T, L, B>&) {
  return diagnose<Diag::zero3_param_sharded, A, L>();
}

}  // namespace shardalg
