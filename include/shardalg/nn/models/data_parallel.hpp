// shardalg/nn/models/data_parallel.hpp — the GPT on a dp × tp mesh: data parallelism in the types.
//
//   Mesh mesh(world, {{"dp", 2}, {"tp", 2}});
//   auto model = nn::DataParallelGpt<double>::init(cfg, mesh);     // cfg.batch: the global batch
//   model.forward_backward(tokens, targets);                       // the global batch, every rank
//   model.step(adam, 1.0);          // all_reduce<dp> per bucket, then Adam (every replica)
//   model.step(sharded_adam, 1.0);  // ZeRO-1: reduce_scatter<dp>, Adam on a slice, all_gather<dp>
//
//   Options o;  o.shard_gradients = true;                           // ZeRO-2
//   model.forward_backward(tokens, targets);  // each bucket reduce_scatter<dp>'d during the backward
//   model.step(sharded_adam, 1.0);            // Adam on the slices it kept, all_gather<dp>
//
//   o.shard_parameters = true;                                      // ZeRO-3 (implies shard_gradients)
//   model.forward_backward(tokens, targets);  // all_gather<dp> per bucket first; reduce_scatter<dp> in the backward
//   model.step(sharded_adam, 1.0);            // Adam on the parameter slices in place; nothing gathered
//
// Replica d (its dp coordinate) runs the tensor-parallel Gpt on its tp group, on its balanced
// block of the global batch's b sequences (base/blocks.hpp: [d·b/D, (d+1)·b/D) when D divides b;
// 7 on 3 replicas: 3, 2, 2): the activations are X[dp:Row, tp:…]. Its dropout
// masks are keyed by global token, so they are rows of the one-replica masks. The parameters are
// R on dp; each replica's gradient is a summand of the global one (weighted by its share of the
// counted targets), so it is typed G[dp:Partial, tp:L]:
//
//   nn::update(opt, info, W[tp:L], G[dp:Partial, tp:L])     compile error E130 (the forgotten sync)
//   nn::update(opt, info, W[tp:L], all_reduce<dp>(G))       G[dp:R, tp:L]: the update every replica makes
//
// Context parallelism (a mesh dp × cp × tp, cp > 1): replica d's sequences are split again over
// cp, each cp rank holding its two chunks of every sequence (nn/layers/cp_tokens.hpp), and the
// replica's attention runs over cp (ring or all-to-all: Options::cp_algo). Outside attention a cp
// rank is one more data-parallel rank: its gradient is a summand weighted by its counted targets,
// G[dp:Partial, cp:Partial, tp:L], and both are reduced by one all_reduce per bucket over the
// combined dp × cp group (the "dp" axis of the collectives below is that data group).
//
// ZeRO-2 (Options::shard_gradients): the gradients never stand whole on a rank. The GPT hands each
// gradient over as soon as its backward has made it (Gpt::forward_backward_streamed: the final
// norm's, then block by block from the last, the embedding's last); it is packed into its bucket,
// G[dp:Partial, tp:L], and its storage is released; a bucket whose every gradient has arrived is
// reduce_scatter<dp>'d at once, G_b[dp:C], and only that slice is kept. The step is ZeRO-1's on those
// slices. The reduce_scatter blocks (no overlap with the backward's compute on these communicators).
// The same buckets and the same collective as ZeRO-1, so the same bits.
//
// ZeRO-3 (Options::shard_parameters, nn/models/zero3.hpp): the parameters never stand whole on a
// rank between steps either. Each bucket of parameters is W_b[dp:C] (this rank's n_b/D columns of
// the padded flat bucket, the gradients' buckets), typed per parameter W[dp:C-of-bucket, tp:L]; at
// init each rank keeps its slice of W_b[dp:R] (split<dp, C>, free) and frees the rest. The buckets
// follow units (Options::unit_buckets: the embedding, each block, the final norm; no bucket spans
// two), and a unit is gathered where the run needs it (Gpt::forward_backward_streamed's hook):
//
//   forward    the embedding; block k: all_gather<dp> its buckets → W[dp:R, tp:L], its forward,
//              freed; the final norm (the embedding and the final norm stay: the backward reads them)
//   backward   block k: all_gather<dp> again, its backward, each parameter freed as soon as its
//              gradient has been handed over (ZeRO-2's stream, block by block from the last)
//   prefetch   (Options::prefetch) the next unit in the run's order is gathered before this one
//              runs. These communicators have no asynchronous all_gather, so the prefetch overlaps
//              nothing; it fixes the order and holds one more unit.
//
// So per step: one all_gather per bucket of the embedding and the final norm, two per bucket of
// every block, one reduce_scatter per bucket; a rank holds at most its slices, the embedding, the
// final norm, two blocks (one without prefetch) and the bucket in flight. The step updates the
// slices W_b[dp:C] in place with G_b[dp:C] and gathers nothing. Between steps a rank holds
// e·Σ n_b/D parameter bytes (parameter_bytes()); the replica's parameters keep shapes and groups
// but no values (its local blocks are 0 × 0; a still-sharded parameter inside the model is a run-time
// error, not a compile error: FullyShardedParam is the typed form). Not with the pipeline
// (nn/models/pipeline_gpt.hpp).
//
// Communication per step on dp: one all_reduce of one value (the loss); then one all_reduce per
// gradient bucket (nn/optim/grad_buckets.hpp), or one reduce_scatter and one all_gather per bucket with
// the sharded optimizer (nn/optim/sharded_adam.hpp), plus its gradient norm (one all_reduce of two values
// on dp); with ZeRO-3 the all_gathers above in forward_backward instead of in the step. The tensor-parallel traffic is the Gpt's (nn/models/gpt.hpp), on the tp group.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardalg/mesh/collectives.hpp"
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/models/zero3.hpp"
#include "shardalg/nn/optim/grad_buckets.hpp"
#include "shardalg/nn/optim/sharded_adam.hpp"

namespace shardalg::nn {

/// The optimizer update with a gradient on a mesh: Partial on any axis is E130 (reduce it first);
/// otherwise the update runs on the gradient's view onto its last axis (the parameter's group).
template <class Opt, class T, class LP, class B, class... Os>
auto update(Opt& opt, const ParamInfo& info, Sharded<T, LP, B>& w, const MeshSharded<T, Axes<Os...>, B>& g,
            double scale = 1.0) {
  if constexpr (((Os::layout::kind == LayoutKind::partial) || ...)) {
    return diagnose<Diag::update_partial_grad, Opt>();
  } else {
    using Last = typename std::tuple_element_t<sizeof...(Os) - 1, std::tuple<Os...>>::axis;
    return opt.update(info, w, view<Last>(g), scale);
  }
}

template <Element T, class B = CpuBackend>
class DataParallelGpt {
 public:
  using Model = Gpt<T, B>;
  using Mat = typename B::template matrix<T>;
  struct Options {
    /// The most values one gradient bucket carries (0: one bucket per parameter).
    std::size_t bucket_elements = std::size_t{1} << 16;
    /// How attention runs over the cp axis, when the mesh has one.
    CpAlgo cp_algo = CpAlgo::ring;
    /// ZeRO-2: reduce-scatter each bucket during the backward and keep only this rank's slice (see
    /// the file comment); step with a ShardedAdam.
    bool shard_gradients = false;
    /// ZeRO-3: keep only this rank's slice of every parameter bucket between steps, all_gather<dp>
    /// each unit's buckets where the run needs them (see the file comment); implies shard_gradients
    /// and unit_buckets; step with a ShardedAdam.
    bool shard_parameters = false;
    /// ZeRO-3: gather the next unit (in the run's order) before running this one — the order an
    /// asynchronous all_gather would overlap; on these blocking communicators it costs one more
    /// unit held and gains no time (see the file comment).
    bool prefetch = true;
    /// No bucket spans two units (the embedding, each block, the final norm): ZeRO-3's plan. The
    /// others pack across units unless this is set.
    bool unit_buckets = false;
  };

  /// `global.batch` is the whole batch; the mesh needs axes dp and tp (any other axis of size 1).
  /// Throws MeshError or DivisibilityError naming the values, and Gpt's own errors.
  static DataParallelGpt init(const GptConfig& global, const Mesh& mesh, Options o = {});

  [[nodiscard]] Model& replica() { return model_; }
  [[nodiscard]] const Model& replica() const { return model_; }
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  [[nodiscard]] const GptConfig& config() const { return global_; }
  /// The bucket plan (made at the first step; per this tensor-parallel rank's parameters).
  [[nodiscard]] const BucketPlan& plan() {
    ensure_plan();
    return plan_;
  }

  /// Forward and backward on the global batch (the same on every rank); returns its mean loss.
  T forward_backward(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets);
  /// The mean loss of the global batch only.
  T loss(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets);

  /// All-reduce the gradients over dp, one all_reduce per bucket, and write the results back into
  /// the replica's gradients: G[dp:Partial, tp:L] → all_reduce<dp> → G[dp:R, tp:L] → view<tp>.
  /// step() does this itself; call it first to inspect the reduced gradients (grad_masters).
  void reduce_gradients();
  /// The gradients reduced over dp, as logical tensors (gathers over tp): the whole batch's.
  Masters grad_masters();

  /// Reduce the gradients over dp (reduce_gradients), then clip by the global norm and update with
  /// `opt` (Adam, Sgd) on every replica: Gpt::step on the reduced gradients. Returns the norm
  /// before clipping; a non-finite norm skips the step.
  template <class Opt>
  double step(Opt& opt, double max_grad_norm = 0.0) {
    if (params_.active())
      throw ShapeError("DataParallelGpt: with shard_parameters (ZeRO-3) the replica holds no whole parameters "
                       "between steps; step with a ShardedAdam");
    reduce_gradients();
    reduced_ = false;
    return model_.step(opt, max_grad_norm);
  }

  /// ZeRO-1: per bucket, reduce_scatter<dp> the gradients, update this rank's slice with Adam
  /// (its moments only), all_gather<dp> the parameters. The same norm, clipping and skip rule.
  /// ZeRO-3: the update of the parameter slices in place, and no all_gather.
  double step(ShardedAdam<T, B>& opt, double max_grad_norm = 0.0);

  /// ZeRO-2: the most gradient bytes this rank's data-parallel buffers held during the last
  /// backward — the buckets still filling and the slices kept — beside which the GPT holds one
  /// block's whole gradients while handing them over (0 without shard_gradients).
  [[nodiscard]] std::size_t gradient_peak_bytes() const { return grad_peak_bytes_; }
  /// ZeRO-2: this rank's gradient slices, one per bucket (G_b[dp:C]), after forward_backward.
  [[nodiscard]] const std::vector<Mat>& gradient_slices() const { return gslice_; }

  /// ZeRO-3: the parameter bytes this rank holds, counted from the storage itself: the replica's
  /// parameters' local blocks and the slices (between steps: the slices alone, e·Σ n_b/D).
  [[nodiscard]] std::size_t parameter_bytes() {
    std::size_t n = params_.slice_bytes();
    model_.visit_params([&](const ParamInfo&, const TensorMap&, auto& w) { n += static_cast<std::size_t>(w.local().size()) * sizeof(T); });
    return n;
  }
  /// ZeRO-3: the most parameter bytes held during the last forward_backward (slices, the gathered
  /// replica and the bucket in flight); 0 without shard_parameters.
  [[nodiscard]] std::size_t parameter_peak_bytes() const { return params_.peak_bytes(); }
  /// ZeRO-3: this rank's parameter slices, one per bucket (W_b[dp:C]); empty without shard_parameters.
  [[nodiscard]] const std::vector<typename ParamShards<T, B>::Slice>& parameter_slices() const { return params_.slices(); }

  /// The logical masters (any mesh can load them). ZeRO-3: the slices are gathered for this
  /// (all_gather<dp> per bucket, scope dp.masters) and released again.
  Masters masters() {
    if (!params_.active()) return model_.masters();
    {
      auto sc = scope("dp.masters");
      params_.gather(model_, plan_);
    }
    Masters m = model_.masters();
    params_.release_all();
    return m;
  }
  /// ZeRO-3: the replica loads them whole, keeps its slices, and frees the rest (no communication).
  void load(const Masters& m) {
    model_.load(m);
    if (params_.active()) params_.shard(model_, plan_, data_);
  }
  /// The sharded optimizer's moments as logical masters ("m." / "v."), like Gpt::optimizer_masters
  /// of an Adam: gathered over dp (verification-class traffic), so any mesh can load them.
  Masters optimizer_masters(ShardedAdam<T, B>& opt) { return model_.optimizer_masters(full_adam(opt)); }
  template <class Opt>
  Masters optimizer_masters(const Opt& opt) {
    return model_.optimizer_masters(opt);
  }
  /// Load moments written at any mesh into the sharded optimizer (this rank keeps its slices).
  void load_optimizer(ShardedAdam<T, B>& opt, const Masters& in);
  template <class Opt>
  void load_optimizer(Opt& opt, const Masters& in) {
    model_.load_optimizer(opt, in);
  }

 private:
  DataParallelGpt(const GptConfig& global, const Mesh& mesh, Model m, Options o, Group data)
      : global_(global), mesh_(mesh), model_(std::move(m)), opt_(o), data_(std::move(data)) {}

  T run(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, bool backward);

  /// √(Σ_tp Σ_dp sharded + Σ_dp replicated) over this rank's gradient slices: one all_reduce of
  /// two values on dp, then one of one value on tp (Gpt's norm rule, nn/optim/optim.hpp).
  double sliced_norm(const std::vector<Mat>& gslice);

  void ensure_plan() {
    if (!plan_.slots.empty()) return;
    std::vector<BucketSlot> visit;
    model_.visit_params([&](const ParamInfo& info, const TensorMap&, auto& w) {
      visit.push_back(slot_of(info, w));
      if (opt_.unit_buckets) visit.back().unit = unit_of(info.name);
    });
    plan_ = BucketPlan::backward_order(std::move(visit), opt_.bucket_elements, data_.size());
  }
  /// A parameter's unit by its logical name: 0 the embedding's, k + 1 "layers.k.…", L + 1 the final
  /// norm's (Gpt::forward_backward_streamed's units).
  [[nodiscard]] std::size_t unit_of(const std::string& name) const {
    if (name.rfind("final_norm", 0) == 0) return static_cast<std::size_t>(global_.layers) + 1;
    if (name.rfind("layers.", 0) == 0) return std::stoul(name.substr(7)) + 1;
    return 0;
  }
  /// ZeRO-3's unit hook: each unit gathered where the run needs it (and the next one with
  /// prefetch), a block freed after its forward; in the backward take_gradient frees each
  /// parameter once its gradient is handed over.
  struct Zero3Units {
    DataParallelGpt* m;
    void need(std::size_t u) const {
      auto sc = m->scope("dp.params");
      m->params_.gather_unit(m->plan_, u);
    }
    void forward(std::size_t u) const {
      need(u);
      if (m->opt_.prefetch && u <= static_cast<std::size_t>(m->global_.layers)) need(u + 1);
    }
    void forward_done(std::size_t u) const { m->params_.release_unit(m->plan_, u); }
    void backward(std::size_t u) const {
      need(u);
      if (m->opt_.prefetch && u > 1) need(u - 1);
    }
  };
  void require_grads() const {
    if (!model_.grads()) throw ShapeError("DataParallelGpt: step() without gradients; call forward_backward first");
  }
  RecorderScope scope(const std::string& label) const { return shardalg::scope(mesh_.world(), label); }
  /// The whole moments of this tp rank's parameters, gathered over dp into an Adam's state.
  Adam<T, B> full_adam(const ShardedAdam<T, B>& opt);

  GptConfig global_;
  Mesh mesh_;
  Model model_;
  Options opt_;
  Group data_;  // the data group: dp, or dp × cp (see the file comment)
  BucketPlan plan_;
  T weight_ = T(1);
  bool reduced_ = false;  // the replica's gradients hold G[dp:R] (reduce_gradients)
  // ZeRO-2 (shard_gradients)
  std::map<std::string, std::size_t> slot_index_;  // parameter name → its slot in plan_
  std::vector<Mat> open_, gslice_;                  // per bucket: filling (whole, padded) / reduced slice
  std::vector<Index> filled_;                       // per bucket: values packed so far
  std::size_t grad_peak_bytes_ = 0;
  bool sliced_ = false;                             // gslice_ holds the last backward's slices
  ParamShards<T, B> params_;                        // ZeRO-3 (shard_parameters): W_b[dp:C]

  /// ZeRO-2's handler: pack one gradient into its bucket, release it, reduce-scatter a full bucket.
  template <class G>
  void take_gradient(const ParamInfo& info, G& g);
};

// ---- DataParallelGpt's members defined outside the class (not inline: see nn/models/gpt.hpp).
template <Element T, class B>
DataParallelGpt<T, B> DataParallelGpt<T, B>::init(const GptConfig& global, const Mesh& mesh, Options o) {
    using shardalg::detail::cat;
    if (!mesh.has("dp") || !mesh.has("tp"))
      throw MeshError(cat("DataParallelGpt: the mesh ", mesh.describe(), " needs the axes dp and tp"));
    for (const auto& a : mesh.axes())
      if (a.name != "dp" && a.name != "tp" && a.name != "cp" && a.size != 1)
        throw MeshError(cat("DataParallelGpt: axis ", a.name, " of size ", a.size, " is not supported (only dp, cp and tp)"));
    const int d = mesh.size("dp");
    if (global.batch < d)
      throw DivisibilityError(cat("DataParallelGpt: batch ", global.batch, " is smaller than the dp size ", d,
                                  " (every replica needs a sequence)"));
    // Replica r takes its balanced block of the sequences (7 on 3 replicas: 3, 2, 2); the loss is
    // weighted by counted targets (run), so the mean is the global one whatever the split.
    GptConfig local = global;
    local.batch = block_size(global.batch, d, mesh.group("dp").rank());
    const int cp = mesh.has("cp") ? mesh.size("cp") : 1;
    if (cp > 1) CpTokens::check(global.seq, cp);
    auto model = Model::init(local, mesh.group("tp"));
    // The data group: every rank of this tp coordinate, dp-major (dp × cp; dp alone without cp). It
    // plays the dp axis in the types below (and in the ledger: axis "dp").
    Group data = mesh.group("dp");
    if (cp > 1) {
      data = mesh.world().split(mesh.group("tp").rank(), mesh.group("dp").rank() * cp + mesh.group("cp").rank(), "dp");
      model.set_context_parallel(mesh.group("cp"), o.cp_algo);
    }
    if (o.shard_parameters) o.shard_gradients = o.unit_buckets = true;
    DataParallelGpt out(global, mesh, std::move(model), o, std::move(data));
    if (o.shard_parameters) {  // ZeRO-3: keep this rank's slice of W_b[dp:R] (every replica's init is the same)
      out.ensure_plan();
      out.params_.shard(out.model_, out.plan_, out.data_);
    }
    return out;
  }

template <Element T, class B>
T DataParallelGpt<T, B>::forward_backward(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) {
    return run(tokens, targets, true);
  }

template <Element T, class B>
T DataParallelGpt<T, B>::loss(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) {
    return run(tokens, targets, false);
  }

template <Element T, class B>
void DataParallelGpt<T, B>::reduce_gradients() {
    require_grads();
    if (reduced_) return;
    ensure_plan();
    const Group& dpg = data_;
    if (sliced_) {  // ZeRO-2: the slices, all_gather<dp>'d back into whole G[dp:R] (the reduced gradients)
      std::vector<Mat> whole(plan_.buckets());
      {
        auto sc = scope("dp.grads");
        for (std::size_t b = 0; b < plan_.buckets(); ++b) {
          MeshSharded<T, Axes<On<dp, ColSharded>>, B> slice(gslice_[b], 1, plan_.padded[b], {dpg});
          whole[b] = all_gather<dp>(slice).local();
        }
      }
      std::size_t k = 0;
      model_.visit_grads([&](const ParamInfo&, auto& w, auto& g) {
        using G = std::remove_cvref_t<decltype(g)>;
        const auto& s = plan_.slots[k++];
        typename G::local_type local(s.rows, s.cols);
        unpack(whole[s.bucket], s, local);
        auto r = stack<dp, Replicated>(dpg, lift<tp>(G(std::move(local), w.rows(), w.cols(), w.group())));
        g = view<tp>(std::move(r));
      });
      reduced_ = true;
      return;
    }
    std::vector<Mat> reduced(plan_.buckets());
    std::vector<Mat> flat;
    for (Index n : plan_.elements) flat.push_back(Mat::Zero(1, n));
    std::size_t k = 0;
    {
      auto sc = scope("dp.grads");
      model_.visit([&](const ParamInfo&, auto&, const auto& g) {
        const auto& s = plan_.slots[k++];
        auto summand = stack<dp, Partial>(dpg, lift<tp>(weight_ * g));  // G[dp:Partial, tp:L]
        pack(summand.local(), s, flat[s.bucket]);
        if (k == plan_.slots.size() || plan_.slots[k].bucket != s.bucket) {  // the bucket is full
          MeshSharded<T, Axes<On<dp, Partial>>, B> bucket(std::move(flat[s.bucket]), 1, plan_.elements[s.bucket], {dpg});
          reduced[s.bucket] = all_reduce<dp>(bucket).local();  // → [dp:R]
        }
      });
    }
    k = 0;
    model_.visit_grads([&](const ParamInfo&, auto&, auto& g) {
      using G = std::remove_cvref_t<decltype(g)>;
      const auto& s = plan_.slots[k++];
      typename G::local_type local(s.rows, s.cols);
      unpack(reduced[s.bucket], s, local);
      auto whole = stack<dp, Replicated>(dpg, lift<tp>(G(std::move(local), g.rows(), g.cols(), g.group())));
      g = view<tp>(std::move(whole));  // only a G[dp:R] views onto tp (E164 for G[dp:Partial])
    });
    reduced_ = true;
  }

template <Element T, class B>
Masters DataParallelGpt<T, B>::grad_masters() {
    reduce_gradients();
    return model_.grad_masters();
  }

template <Element T, class B>
double DataParallelGpt<T, B>::step(ShardedAdam<T, B>& opt, double max_grad_norm) {
    require_grads();
    ensure_plan();
    const Group& dpg = data_;
    const int d = dpg.size(), r = dpg.rank();
    if (!opt.bound()) opt.bind(plan_, d, r);
    if (reduced_)
      throw ShapeError("DataParallelGpt: the gradients are already all-reduced (reduce_gradients); the sharded "
                       "optimizer reduce-scatters them itself: step it before reducing");
    std::vector<Mat> gslice(plan_.buckets());
    std::size_t k = 0;
    if (sliced_) {  // ZeRO-2: reduce-scattered during the backward
      gslice = std::move(gslice_);
      gslice_.assign(plan_.buckets(), Mat());
      sliced_ = false;
    } else {
      std::vector<Mat> flat;
      for (Index n : plan_.padded) flat.push_back(Mat::Zero(1, n));  // zeros in the padding
      auto sc = scope("dp.grads");
      model_.visit([&](const ParamInfo&, auto&, const auto& g) {
        const auto& s = plan_.slots[k++];
        auto summand = stack<dp, Partial>(dpg, lift<tp>(weight_ * g));  // G[dp:Partial, tp:L]
        pack(summand.local(), s, flat[s.bucket]);
        if (k == plan_.slots.size() || plan_.slots[k].bucket != s.bucket) {
          MeshSharded<T, Axes<On<dp, Partial>>, B> bucket(std::move(flat[s.bucket]), 1, plan_.padded[s.bucket], {dpg});
          gslice[s.bucket] = reduce_scatter<dp, ColSharded>(bucket).local();  // → [dp:C]: my slice
        }
      });
    }
    const double norm = sliced_norm(gslice);
    if (!std::isfinite(norm)) {
      model_.end_step(false);
      return norm;
    }
    const double scale = clip_factor(norm, max_grad_norm);
    opt.begin_step();
    {  // ZeRO-3: the slices W_b[dp:C] are the parameters, updated in place; ZeRO-1: each rank updates its slice, then all_gather<dp>
      auto sc = scope("dp.params");
      sharded_update(opt, plan_, dpg, gslice, scale, params_.active() ? &params_.slices() : nullptr,
                     [&](auto&& f) { model_.visit_params(f); });
    }
    model_.end_step(true);
    return norm;
  }

template <Element T, class B>
template <class G>
void DataParallelGpt<T, B>::take_gradient(const ParamInfo& info, G& g) {
    using shardalg::detail::cat;
    const auto it = slot_index_.find(info.name);
    if (it == slot_index_.end()) throw ShapeError(cat("DataParallelGpt: a gradient for ", info.name, ", which has no bucket"));
    const auto& s = plan_.slots[it->second];
    const Group& dpg = data_;
    Mat& flat = open_[s.bucket];
    if (flat.size() == 0) flat = Mat::Zero(1, plan_.padded[s.bucket]);  // zeros in the padding
    auto summand = stack<dp, Partial>(dpg, lift<tp>(weight_ * g));  // G[dp:Partial, tp:L]
    pack(summand.local(), s, flat);
    g = G();  // the whole gradient is released: from here on only its bucket holds it
    params_.release(it->second);  // ZeRO-3: the parameter is not read again in this backward
    filled_[s.bucket] += s.size();
    std::size_t held = 0;
    for (std::size_t b = 0; b < plan_.buckets(); ++b)
      held += static_cast<std::size_t>(open_[b].size() + gslice_[b].size()) * sizeof(T);
    grad_peak_bytes_ = std::max(grad_peak_bytes_, held);
    if (filled_[s.bucket] == plan_.elements[s.bucket]) {  // the bucket is complete: G_b[dp:Partial] → [dp:C]
      auto sc = scope("dp.grads");
      MeshSharded<T, Axes<On<dp, Partial>>, B> bucket(std::move(flat), 1, plan_.padded[s.bucket], {dpg});
      gslice_[s.bucket] = reduce_scatter<dp, ColSharded>(bucket).local();
      flat = Mat();
    }
  }

template <Element T, class B>
void DataParallelGpt<T, B>::load_optimizer(ShardedAdam<T, B>& opt, const Masters& in) {
    ensure_plan();
    Adam<T, B> full(opt.options());
    model_.load_optimizer(full, in);
    const Group& dpg = data_;
    opt.bind(plan_, dpg.size(), dpg.rank());
    using SM = typename ShardedAdam<T, B>::StateMat;
    for (std::size_t b = 0; b < plan_.buckets(); ++b) {
      SM fm = SM::Zero(1, plan_.padded[b]), fv = SM::Zero(1, plan_.padded[b]), fw = SM::Zero(1, plan_.padded[b]);
      for (const auto& s : plan_.slots) {
        if (s.bucket != b) continue;
        auto it = full.state().find(s.name);
        if (it == full.state().end()) continue;
        pack(it->second.m, s, fm);
        pack(it->second.v, s, fv);
        if (it->second.master.size() > 0) pack(it->second.master, s, fw);  // a 16-bit model's fp32 master
      }
      const Index len = plan_.padded[b] / dpg.size();
      opt.m()[b] = fm.middleCols(dpg.rank() * len, len);
      opt.v()[b] = fv.middleCols(dpg.rank() * len, len);
      if (!opt.master().empty()) opt.master()[b] = fw.middleCols(dpg.rank() * len, len);  // 0: seeded from W
    }
  }

template <Element T, class B>
T DataParallelGpt<T, B>::run(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, bool backward) {
    using shardalg::detail::cat;
    const Index total = global_.batch * global_.seq;
    if (static_cast<Index>(tokens.size()) != total || static_cast<Index>(targets.size()) != total)
      throw ShapeError(cat("DataParallelGpt: ", tokens.size(), " tokens and ", targets.size(), " targets for a global batch of ",
                           global_.batch, " × ", global_.seq, " = ", total));
    const Group& dpg = data_;
    const Group& rep = mesh_.group("dp");
    const BlockExtent mine_seqs = block_of(global_.batch, rep.size(), rep.rank());
    const Index per = mine_seqs.size * global_.seq, t0 = mine_seqs.offset * global_.seq;
    // This rank's tokens: replica d's sequences [t0, t0 + per); with cp, its chunks of each.
    std::vector<std::int64_t> tk(tokens.begin() + t0, tokens.begin() + t0 + per), tg(targets.begin() + t0, targets.begin() + t0 + per);
    if (model_.context_parallel_size() > 1) {
      const CpTokens tok{global_.seq, per / global_.seq, model_.context_parallel_size(), mesh_.group("cp").rank()};
      std::vector<std::int64_t> a(static_cast<std::size_t>(tok.rows())), b(a.size());
      for (Index i = 0; i < tok.rows(); ++i) {
        a[static_cast<std::size_t>(i)] = tk[static_cast<std::size_t>(tok.global_row(i))];
        b[static_cast<std::size_t>(i)] = tg[static_cast<std::size_t>(tok.global_row(i))];
      }
      tk = std::move(a);
      tg = std::move(b);
    }
    // This rank's share of the mean: its counted targets over all counted targets.
    Index all = 0, mine = 0;
    for (Index i = 0; i < total; ++i) all += targets[static_cast<std::size_t>(i)] != global_.ignore_index;
    for (auto t : tg) mine += t != global_.ignore_index;
    weight_ = all > 0 ? static_cast<T>(mine) / static_cast<T>(all) : T(0);
    model_.set_token_offset(t0);
    if (backward) reduced_ = false;
    const Zero3Units units{this};
    if (params_.active()) {  // ZeRO-3: W_b[dp:C] → all_gather<dp> per unit, where the run needs it
      params_.reset_peak();
      params_.begin(model_, plan_);
    }
    T l;
    if (backward && opt_.shard_gradients) {  // ZeRO-2: the buckets reduce-scattered during the backward
      ensure_plan();
      if (slot_index_.empty())
        for (std::size_t k = 0; k < plan_.slots.size(); ++k) slot_index_[plan_.slots[k].name] = k;
      open_.assign(plan_.buckets(), Mat());
      gslice_.assign(plan_.buckets(), Mat());
      filled_.assign(plan_.buckets(), 0);
      grad_peak_bytes_ = 0;
      sliced_ = false;
      const auto take = [&](const ParamInfo& info, auto& g) { take_gradient(info, g); };
      l = params_.active() ? model_.forward_backward_streamed(tk, tg, take, units)
                           : model_.forward_backward_streamed(tk, tg, take);
      for (std::size_t b = 0; b < plan_.buckets(); ++b)
        if (filled_[b] != plan_.elements[b])
          throw ShapeError(cat("DataParallelGpt: bucket ", b, " received ", filled_[b], " of its ", plan_.elements[b],
                               " gradient values in the backward"));
      sliced_ = true;
    } else {
      l = backward ? model_.forward_backward(tk, tg) : params_.active() ? model_.loss(tk, tg, units) : model_.loss(tk, tg);
    }
    if (params_.active()) params_.release_all();  // after a backward: already, one by one
    // The global mean Σ_d w_d · mean_d: one all_reduce of one value over dp.
    T x = weight_ * l;
    auto sc = scope("dp.loss");
    Group g = dpg;
    g.all_reduce(&x, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
    return x;
  }

template <Element T, class B>
double DataParallelGpt<T, B>::sliced_norm(const std::vector<Mat>& gslice) {
    auto sc = scope("grad_norm");
    return sliced_grad_norm(plan_, gslice, data_, mesh_.group("tp"));
  }

template <Element T, class B>
Adam<T, B> DataParallelGpt<T, B>::full_adam(const ShardedAdam<T, B>& opt) {
    ensure_plan();
    Adam<T, B> full(opt.options());
    full.set_step_count(opt.step_count());
    if (!opt.bound()) return full;
    Group dpg = data_;
    using SM = typename ShardedAdam<T, B>::StateMat;
    const bool master = !opt.master().empty();  // a 16-bit model: the fp32 master travels too
    for (std::size_t b = 0; b < plan_.buckets(); ++b) {
      SM fm(1, plan_.padded[b]), fv(1, plan_.padded[b]), fw(master ? 1 : 0, master ? plan_.padded[b] : 0);
      const auto n = static_cast<std::size_t>(opt.m()[b].size());
      dpg.all_gather(opt.m()[b].data(), fm.data(), n, CallInfo{"C", "R", true});
      dpg.all_gather(opt.v()[b].data(), fv.data(), n, CallInfo{"C", "R", true});
      if (master) dpg.all_gather(opt.master()[b].data(), fw.data(), n, CallInfo{"C", "R", true});
      for (const auto& s : plan_.slots) {
        if (s.bucket != b) continue;
        typename Adam<T, B>::Moments mo{SM(s.rows, s.cols), SM(s.rows, s.cols), SM()};
        unpack(fm, s, mo.m);
        unpack(fv, s, mo.v);
        if (master) {
          mo.master.resize(s.rows, s.cols);
          unpack(fw, s, mo.master);
        }
        full.state()[s.name] = std::move(mo);
      }
    }
    return full;
  }

}  // namespace shardalg::nn

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/models.cpp (shardalg::compiled)
namespace shardalg::nn {
extern template class DataParallelGpt<float, CpuBackend>;
extern template class DataParallelGpt<double, CpuBackend>;
}  // namespace shardalg::nn
#endif
