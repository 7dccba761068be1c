// shardalg/nn/models/gpt.hpp — a GPT: vocabulary-parallel embedding → N pre-LN blocks → final norm →
// tied LM head → fused vocabulary-parallel cross-entropy; with or without sequence parallelism.
//
//   without SP                                   with SP (tokens split between blocks)
//   ids → E[Row] lookup → Partial → all_reduce   ids → E[Row] lookup → Partial → reduce_scatter
//       → X[R] → dropout                             → X[Row] → dropout
//   TransformerBlock × N: X[R] → X[R]             SequenceParallelBlock × N: X[Row] → X[Row]
//   final norm on X[R]                            final norm on X[Row] (γ, β gradients Partial)
//   logits[C] = X[R] · Eᵀ[C]                      all_gather → X[R] → logits[C]
//   loss: all_reduce(max) of T, all_reduce(sum) of 2T (3T with label smoothing)
//
// `forward_backward(tokens, targets)` returns the mean loss and keeps every gradient, reduced
// where the layout demands it (under SP: one all_reduce of 2h per norm, scope "grads"), so that
// `step(optimizer, max_grad_norm)` can clip by the global norm (one scalar all_reduce) and update
// every shard locally. All parameters are keyed by their global index (nn/layers/init.hpp), the dropout
// masks too, so the model — and its whole training run — is the same at every TP size, with or
// without SP, up to floating-point summation order (tests/gpt/test_gpt.cpp asserts the curves).
//
// Parameters are enumerated with their logical names (`visit`), and a dense, TP-independent
// view of them — the logical master tensors, unfused and unpadded — is `masters()`; `load()`
// reads it back at any TP size (nn/train/checkpoint.hpp writes it to disk).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "shardalg/bridge/dense.hpp"
#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/layers/cache_bytes.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "shardalg/nn/optim/loss_scaler.hpp"
#include "shardalg/nn/optim/optim.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/nn/models/gpt_params.hpp"
#include "shardalg/nn/models/gpt_stages.hpp"

namespace shardalg::nn {

/// Tensor kind of the dropout on the embedding output (`tensor_id(0, kind)`; the embedding
/// weight is kind 24).
inline constexpr TensorKind embedding_dropout_kind = static_cast<TensorKind>(25);

template <Element T, class B = CpuBackend>
class Gpt {
 public:
  using Emb = VocabParallelEmbedding<T, B>;
  using Loss = VocabParallelCrossEntropy<T, B>;
  using Norm = LayerNorm<T, B>;
  using Plain = TransformerBlock<T, B>;
  using Sp = SequenceParallelBlock<T, B>;
  using BlockGrads = typename Plain::ParamGrads;  // = Sp::ReducedGrads
  static_assert(std::is_same_v<BlockGrads, typename Sp::ReducedGrads>);

  /// Every gradient, in its parameter's layout (nothing Partial).
  struct Grads {
    typename Emb::Weight de;  // lookup + head: the tied weight's whole gradient
    std::vector<BlockGrads> blocks;
    typename Norm::template ParamGrads<Replicated> final_norm;
  };

  /// Throws the layers' typed errors with their texts (heads or ffn not divisible by TP, …).
  static void check(const GptConfig& c, int p);

  /// Megatron's init, keyed by global index: normal(0, init_std), the residual output
  /// projections at init_std/√(2·layers), zero biases, unit norm weights.
  static Gpt init(const GptConfig& c, const Group& g);
  /// The model with the given logical masters (a checkpoint), at this group's TP size.
  static Gpt from_masters(const GptConfig& c, const Masters& m, const Group& g);

  [[nodiscard]] const GptConfig& config() const { return cfg_; }
  [[nodiscard]] const Group& group() const { return group_; }
  [[nodiscard]] const Emb& embedding() const { return emb_; }
  [[nodiscard]] const Norm& final_norm() const { return final_; }
  [[nodiscard]] const std::vector<Plain>& blocks() const { return plain_; }
  [[nodiscard]] const std::vector<Sp>& sp_blocks() const { return sp_; }
  [[nodiscard]] const std::optional<Grads>& grads() const { return grads_; }
  /// Optimizer steps taken (keys the dropout masks).
  [[nodiscard]] long steps() const { return step_; }
  /// Steps that step() skipped because the gradient norm was NaN or infinite (nothing applied).
  [[nodiscard]] long skipped_steps() const { return skipped_; }
  [[nodiscard]] bool last_step_skipped() const { return last_skipped_; }
  /// Check every layer's output and every gradient for NaN and infinity (one verification
  /// all-reduce of one integer per check; off by default, on in shardalg-verify): the first
  /// non-finite value raises NonFiniteError on every rank, naming the layer and the first rank.
  /// CPU backend only.
  void check_finite(bool on) {
    if (on && !std::is_same_v<B, CpuBackend>)
      throw Error("Gpt: check_finite is implemented for the CPU backend only");
    check_finite_ = on;
  }
  [[nodiscard]] bool checking_finite() const { return check_finite_; }
  void set_steps(long s) { step_ = s; }
  /// Data parallelism (nn/models/data_parallel.hpp): this replica's batch starts at global token `t0`
  /// of the whole batch, so its dropout masks are those rows of the one-replica masks.
  /// Context parallelism over `cp` (nn/layers/cp_tokens.hpp): forward_backward then takes this
  /// rank's chunks of every sequence, batch × seq / cp tokens in cp_tokens.hpp's order, and returns
  /// their mean loss; attention runs over cp, dropout masks at the global rows. The gradient is
  /// this rank's summand (G[cp:Partial]): DataParallelGpt on a mesh with a cp axis weighs and
  /// reduces it (nn/models/data_parallel.hpp).
  void set_context_parallel(const Group& cp, CpAlgo algo = CpAlgo::ring) {
    for (auto& b : plain_) b.set_context_parallel(cp, algo);
    for (auto& b : sp_) b.set_context_parallel(cp, algo);
    drop_emb_.cp = Dropout::CpRows{cfg_.seq, cp.size(), cp.rank()};
    cp_size_ = cp.size();
  }
  [[nodiscard]] int context_parallel_size() const { return cp_size_; }
  void set_token_offset(Index t0) {
    drop_emb_.row_base = t0;
    for (auto& b : plain_) b.set_dropout_row_base(t0);
    for (auto& b : sp_) b.set_dropout_row_base(t0);
  }
  /// For an optimizer step applied outside step() (the data-parallel one): drop the gradients,
  /// and count the step as taken (keys the next dropout masks) or as skipped (a non-finite norm).
  void end_step(bool applied) {
    clear_step_grads();
    last_skipped_ = !applied;
    if (applied) ++step_;
    else ++skipped_;
  }
  /// The dropout seed of the current step: a function of (seed, step) only.
  [[nodiscard]] std::uint64_t dropout_seed() const {
    return cfg_.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(step_ + 1));
  }

  /// Overlap each block's f all-reduces (QKV, fc1) with their weight-gradient GEMMs
  /// (ColumnParallelLinear::set_overlap). Sequence-parallel blocks end those backwards in a
  /// reduce-scatter instead, which is not overlapped: for them this changes nothing.
  void set_overlap(OverlapConfig o) {
    for (auto& b : plain_) b.set_overlap(o);
  }

  /// Count the bytes the blocks keep for their backward at every forward_backward, between the
  /// forward and the backward (off by default): held_activations() then has the layer terms of
  /// nn/layers/cache_bytes.hpp (the outside terms stay 0; nn/train/measured_memory.hpp counts those).
  void measure_activations(bool on) { measure_ = on; }
  [[nodiscard]] const ActivationTerms& held_activations() const { return held_; }

  /// No inspection (forward_backward's `inspect`).
  struct NoInspect {
    void operator()(const auto&...) const {}
  };
  /// No unit hook: every parameter is held whole throughout.
  struct NoUnits {
    void forward(std::size_t) const {}
    void forward_done(std::size_t) const {}
    void backward(std::size_t) const {}
  };

  /// Forward and backward on one batch (batch × seq tokens, batch-major, the same on every
  /// rank); keeps the gradients for step(); returns the mean loss.
  T forward_backward(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets);
  /// The same, and `inspect(embedding, stream, block_caches, final_norm, head, loss)` is called once
  /// between the forward and the backward, when everything the backward needs is held: the
  /// embedding's Forward (output and ids), the last block's output, the blocks' caches, the final
  /// norm's, the head's and the loss's Forward. nn/train/measured_memory.hpp measures their bytes.
  template <class Inspect>
  T forward_backward(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, Inspect&& inspect) {
    check_batch(tokens, targets);
    grads_.reset();
    reseed();
    return cfg_.sp ? run<RowSharded>(sp_, tokens, targets, true, inspect)
                   : run<Replicated>(plain_, tokens, targets, true, inspect);
  }
  /// The same, and `ready(info, grad&)` is called during the backward for each gradient as soon as it
  /// is final: the final norm's after the head, each block's after its backward (the last block
  /// first), the tied embedding's last; within each, in visit order. Under SP the norms' gradients
  /// are all-reduced over tp first (per block, instead of once at the end). `ready` may take the
  /// gradient's storage (DataParallelGpt's ZeRO-2 reduce-scatters it over dp and keeps its slice);
  /// what it leaves is kept as forward_backward keeps it.
  ///
  /// `units` says where the run needs a unit's parameters whole (DataParallelGpt's ZeRO-3 gathers
  /// them there and frees them after). Unit 0 is the embedding, unit k + 1 block k, unit L + 1 the
  /// final norm. `units.forward(u)` comes before unit u's forward; `units.forward_done(u)` after a
  /// block's forward; `units.backward(u)` before a block's backward. The embedding and the final
  /// norm get forward(u) only: both are read again by the backward (the tied head reads the
  /// embedding), so they stay until their gradients are handed over.
  template <class Ready, class Units = NoUnits>
  T forward_backward_streamed(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, Ready&& ready,
                              Units&& units = {}) {
    check_batch(tokens, targets);
    grads_.reset();
    reseed();
    return cfg_.sp ? run<RowSharded>(sp_, tokens, targets, true, NoInspect{}, ready, units)
                   : run<Replicated>(plain_, tokens, targets, true, NoInspect{}, ready, units);
  }
  /// The mean loss only (no gradients kept; the same communication as the forward).
  T loss(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets);
  /// The same, with the `units` of forward_backward_streamed (forward(u) and forward_done(u) only).
  template <class Units>
  T loss(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, Units&& units) {
    check_batch(tokens, targets);
    reseed();
    return cfg_.sp ? run<RowSharded>(sp_, tokens, targets, false, NoInspect{}, NoReady{}, units)
                   : run<Replicated>(plain_, tokens, targets, false, NoInspect{}, NoReady{}, units);
  }


  /// Clip by the global norm (max_grad_norm ≤ 0: no clipping), then one optimizer update of
  /// every parameter. Returns the global gradient norm before clipping.
  template <class Opt>
  double step(Opt& opt, double max_grad_norm = 0.0);
  /// The same with dynamic loss scaling (nn/optim/loss_scaler.hpp): the gradients hold
  /// loss_scale()·dL/dθ; a non-finite norm skips the step and shrinks the scale, otherwise the
  /// update divides by the scale (the clip sees the unscaled norm, which is returned). Sets the
  /// loss scale of the next forward_backward to scaler.scale(). The model's loss scale must be
  /// the scaler's at the call: ShapeError naming both.
  template <class Opt>
  double step(Opt& opt, double max_grad_norm, LossScaler& scaler);
  /// Gradient accumulation over micro-batches with Megatron's main_grad: add the gradients of the
  /// last forward_backward into accumulators of type Main — fp32 for 16-bit T (each micro-batch's
  /// 16-bit gradient added in fp32, never rounded back to 16 bits), T otherwise — created at zero.
  /// The next step() applies their mean over the micro-batches accumulated (the global norm and
  /// the clip are of the mean), then clears them. Every micro-batch's forward_backward must be
  /// accumulated before step(): ShapeError otherwise, and for a second accumulate of the same one.
  void accumulate_gradients();
  /// Micro-batches accumulated since the last step.
  [[nodiscard]] int accumulated_micro_batches() const { return micro_; }
  /// The accumulated sums (not the mean) as logical tensors, dense and TP-independent, like
  /// grad_masters(). Needs an accumulated micro-batch.
  Masters main_grad_masters();
  /// The factor the loss gradient is multiplied by in forward_backward (1: no scaling); > 0 and finite.
  void set_loss_scale(double s) {
    if (!(s > 0 && std::isfinite(s)))
      throw ShapeError(shardalg::detail::cat("Gpt: loss scale ", s, " must be positive and finite"));
    loss_scale_ = s;
  }
  [[nodiscard]] double loss_scale() const { return loss_scale_; }

  /// f(info, parameter, gradient&) with the gradient mutable (data parallelism writes the reduced
  /// gradient back: nn/models/data_parallel.hpp). Needs gradients.
  template <class F>
  void visit_grads(F&& f) {
    if (!grads_) throw ShapeError("Gpt: visit_grads() without gradients; call forward_backward first");
    visit_all(&*grads_, [&](const ParamInfo& i, const TensorMap&, auto& w, const auto* g) {
      using G = std::remove_cvref_t<decltype(*g)>;
      f(i, w, const_cast<G&>(*g));  // grads_ is this object's own, non-const storage
    });
  }
  /// f(info, parameter, gradient) for every parameter (needs gradients).
  template <class F>
  void visit(F&& f) {
    if (!grads_) throw ShapeError("Gpt: visit() without gradients; call forward_backward first");
    visit_all(&*grads_, [&](const ParamInfo& i, const TensorMap&, auto& w, const auto* g) { f(i, w, *g); });
  }
  /// f(info, map, parameter) for every parameter.
  template <class F>
  void visit_params(F&& f) {
    visit_all(nullptr, [&](const ParamInfo& i, const TensorMap& m, auto& w, const auto*) { f(i, m, w); });
  }

  /// The logical master tensors (gathers; every rank must call; every rank gets them).
  Masters masters();
  /// Load logical masters (from any TP size): each rank takes its shard by global index.
  void load(const Masters& in);
  /// The gradients as logical tensors (gathered; needs gradients), e.g. for a dense check.
  Masters grad_masters();
  template <class Opt>
  static constexpr bool has_moments = requires(const Opt& o) { o.state().begin()->second.m; };

  /// Optimizer state (Adam's moments, SGD's momentum) as logical masters, prefixed "m." / "v." /
  /// "momentum."; Adam's fp32 master of a 16-bit parameter too ("master."), which holds what the
  /// 16-bit weight cannot (a resumed run without it restarts from the rounded weight). A parameter
  /// without state yet is skipped. Each tensor keeps its own type on the way (fp32 state of a
  /// 16-bit model is not rounded to 16 bits).
  template <class Opt>
  Masters optimizer_masters(const Opt& opt) {
    Masters out;
    visit_params([&](const ParamInfo& i, const TensorMap& m, auto& w) {
      using L = typename std::remove_cvref_t<decltype(w)>::layout;
      const auto as = [&](const auto& local) {  // this rank's state block, sharded like w
        using E = typename std::remove_cvref_t<decltype(local)>::Scalar;
        return Sharded<E, L, B>(local, w.rows(), w.cols(), w.group());
      };
      auto it = opt.state().find(i.name);
      if (it == opt.state().end()) return;
      if constexpr (has_moments<Opt>) {
        unmap(as(it->second.m), m, "m.", out);
        unmap(as(it->second.v), m, "v.", out);
        if constexpr (requires { it->second.master; })
          if (it->second.master.size() > 0) unmap(as(it->second.master), m, "master.", out);
      } else {
        unmap(as(it->second), m, "momentum.", out);
      }
    });
    return out;
  }
  /// Load optimizer state written by optimizer_masters (at any TP size).
  template <class Opt>
  void load_optimizer(Opt& opt, const Masters& in) {
    visit_params([&](const ParamInfo& i, const TensorMap& m, auto& w) {
      if constexpr (has_moments<Opt>) {
        if (!in.count("m." + m.parts.at(0))) return;
        auto& st = opt.state()[i.name];
        using E = typename std::remove_cvref_t<decltype(st.m)>::Scalar;
        st.m = remap<E>(w, m, "m.", in).local();
        st.v = remap<E>(w, m, "v.", in).local();
        if constexpr (requires { st.master; }) {
          if (in.count("master." + m.parts.at(0))) st.master = remap<E>(w, m, "master.", in).local();
          else st.master = {};
        }
      } else {
        if (!in.count("momentum." + m.parts.at(0))) return;
        opt.state()[i.name] = remap(w, m, "momentum.", in).local();
      }
    });
  }

 private:
  Gpt(const GptConfig& c, const Group& g);

  void check_batch(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) const;

  void reseed() {
    const auto s = dropout_seed();
    drop_emb_.seed = s;
    for (auto& b : plain_) b.set_dropout_seed(s);
    for (auto& b : sp_) b.set_dropout_seed(s);
  }

  RecorderScope scope(const std::string& label) const { return shardalg::scope(group_, label); }

  /// The model on activations in layout L (R: plain blocks; Row: sequence-parallel blocks).

  struct NoReady {
    void operator()(const auto&...) const {}
  };

  template <class L, class Blocks, class Inspect = NoInspect, class Ready = NoReady, class Units = NoUnits>
  T run(Blocks& blocks, std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets, bool backward,
        Inspect&& inspect = {}, Ready&& ready = {}, Units&& units = {}) {
    constexpr bool sp = std::is_same_v<L, RowSharded>;
    constexpr bool streamed = !std::is_same_v<std::remove_cvref_t<Ready>, NoReady>;
    // ready(info, grad&) over a group of gradients, through the visit helpers' (info, map, w, g*) form
    auto hand = [&](const ParamInfo& i, const TensorMap&, auto&, const auto* g) {
      using G = std::remove_cvref_t<decltype(*g)>;
      finite("gradient of " + i.name, *g);
      ready(i, const_cast<G&>(*g));  // this run's own, non-const storage
    };
    using X = Sharded<T, L, B>;
    using Cache = typename std::remove_cvref_t<decltype(blocks[0])>::Cache;
    // ---- forward
    auto fwd = scope("fwd");
    const std::size_t last_unit = blocks.size() + 1;  // the final norm's (units: see forward_backward_streamed)
    units.forward(0);
    auto ef = stages::embed<sp>(emb_, group_, tokens);
    finite("forward: embedding output", ef.y);
    std::vector<Cache> caches;
    caches.reserve(blocks.size());
    X x = stages::blocks_forward(
        blocks, drop_emb_.forward(ef.y), caches, group_, [](std::size_t k) { return k; },
        [&](std::size_t k, auto&) { units.forward(k + 1); },
        [&](std::size_t k, const X& y) {
          units.forward_done(k + 1);
          finite("forward: layer " + std::to_string(k) + " output", y);
        });
    units.forward(last_unit);
    auto fn = final_.forward(x);
    finite("forward: final norm output", fn.y);
    auto head = stages::head<sp>(emb_, group_, fn.y);
    auto l = stages::loss(loss_, group_, head.logits, targets);
    finite("forward: logits", head.logits);
    fwd.reset();
    if (measure_) {
      held_ = ActivationTerms{};
      for (const auto& c : caches) detail::add_block_cache(held_, c);
    }
    if (!backward) return l.mean;
    inspect(std::as_const(ef), std::as_const(x), std::as_const(caches), std::as_const(fn), std::as_const(head),
            std::as_const(l));
    // ---- backward
    auto bwd = scope("bwd");
    auto dz = loss_scale_ == 1.0 ? loss_.backward_mean(l.cache) : loss_.backward_mean_scaled(l.cache, loss_scale_);  // local
    auto hg = stages::head_backward<sp>(emb_, group_, head.cache, dz);
    finite("backward: head input gradient", hg.dx);
    auto fg = final_.backward(fn.cache, hg.dx);
    X dx = std::move(fg.dx);
    std::optional<typename Norm::template ParamGrads<Replicated>> final_ready;  // streamed: the final norm's, reduced
    std::vector<BlockGrads> ready_blocks;                                      // streamed: each block's, reduced
    if constexpr (streamed) {
      if constexpr (sp) {
        auto s = scope("norm_grads");
        final_ready = Sp::reduce_norm(std::move(fg.params));  // Partial → R: 2h
      } else {
        final_ready = std::move(fg.params);
      }
      visit_norm(final_, &*final_ready, "final_norm", hand);
      ready_blocks.resize(blocks.size());
    }
    std::vector<typename std::remove_cvref_t<decltype(blocks[0])>::ParamGrads> bgs(blocks.size());
    for (std::size_t i = blocks.size(); i-- > 0;) {
      auto s = scope("layer" + std::to_string(i));
      units.backward(i + 1);
      auto g = blocks[i].backward(caches[i], dx);
      finite("backward: layer " + std::to_string(i) + " input gradient", g.dx);
      dx = std::move(g.dx);
      caches[i] = Cache{};  // release as we go
      if constexpr (streamed) {
        if constexpr (sp) ready_blocks[i] = blocks[i].reduce_grads(std::move(g.params));  // the norms': Partial → R
        else ready_blocks[i] = std::move(g.params);
        visit_block(blocks[i], &ready_blocks[i], "layers." + std::to_string(i) + ".", hand);
      } else {
        bgs[i] = std::move(g.params);
      }
    }
    dx = drop_emb_.backward(dx);
    auto eg = stages::embed_backward<sp>(emb_, group_, ef.cache, dx);
    bwd.reset();
    // ---- the gradients, in their parameters' layouts
    Grads gr{hg.params.de + eg.de, {}, {}};
    if constexpr (streamed) {
      visit_embedding(&gr.de, hand);
      gr.blocks = std::move(ready_blocks);
      gr.final_norm = std::move(*final_ready);
      grads_ = std::move(gr);
      return l.mean;
    }
    auto red = scope("grads");
    if constexpr (sp) {
      for (std::size_t i = 0; i < blocks.size(); ++i) gr.blocks.push_back(blocks[i].reduce_grads(std::move(bgs[i])));
      auto s = scope("norm_grads");
      gr.final_norm = Sp::reduce_norm(std::move(fg.params));  // Partial → R: 2h
    } else {
      gr.blocks = std::move(bgs);
      gr.final_norm = std::move(fg.params);
    }
    grads_ = std::move(gr);
    if (check_finite_)
      visit([&](const ParamInfo& info, auto&, const auto& g) { finite("gradient of " + info.name, g); });
    return l.mean;
  }

  /// The finite check of one tensor (nothing when off): every rank learns the lowest rank with a
  /// NaN or Inf in its block, in one verification all-reduce, and all throw the same error.
  template <class X>
  void finite(const std::string& where, const X& x) const {
    if constexpr (std::is_same_v<B, CpuBackend>) {
      if (!check_finite_) return;
      const auto& m = x.local();
      const bool ok = m.size() == 0 || m.array().isFinite().all();
      std::int32_t first = ok ? std::numeric_limits<std::int32_t>::max() : group_.rank();
      Group g = group_;
      g.all_reduce(&first, 1, ReduceOp::min, CallInfo{"-", "-", true});
      if (first != std::numeric_limits<std::int32_t>::max())
        throw NonFiniteError(shardalg::detail::cat("Gpt: a NaN or infinity first appears in the ", where, " (step ",
                                                   step_, "), on rank ", first));
    }
  }

  /// f(info, parameter, gradient) over what a step applies: forward_backward's gradients, or with
  /// accumulated micro-batches the sums in main_ (Sharded<Main, L, B>, L the gradient's layout).
  template <class F>
  void visit_step_grads(F&& f) {
    visit([&](const ParamInfo& info, auto& w, const auto& g) {
      if (micro_ == 0) {
        f(info, w, g);
      } else {
        using L = typename std::remove_cvref_t<decltype(g)>::layout;
        const Sharded<Main, L, B> m(main_.at(info.name), g.rows(), g.cols(), g.group());
        f(info, w, m);
      }
    });
  }
  /// The checks before a step: gradients present, and either none accumulated or the last one too.
  void check_step_grads() const {
    if (!grads_) throw ShapeError("Gpt: step() without gradients; call forward_backward first");
    if (micro_ > 0 && !grads_in_main_)
      throw ShapeError(shardalg::detail::cat("Gpt: step() after ", micro_, " accumulated micro-batch",
                                             micro_ == 1 ? "" : "es",
                                             " and a forward_backward not accumulated; call accumulate_gradients() "
                                             "after each"));
  }
  void clear_step_grads() {
    grads_.reset();
    main_.clear();
    micro_ = 0;
    grads_in_main_ = false;
  }

  // ---- parameter enumeration ---------------------------------------------------------------
  template <class F>
  void visit_embedding(const typename Emb::Weight* de, F& f) {
    f(ParamInfo{"embedding.weight", true, {}}, TensorMap{{"embedding"}, {cfg_.hidden}, cfg_.vocab, {}}, emb_.weight(), de);
  }
  template <class F>
  void visit_all(const Grads* g, F&& f) {
    visit_embedding(g ? &g->de : nullptr, f);
    for (std::size_t i = 0; i < plain_.size(); ++i)
      visit_block(plain_[i], g ? &g->blocks[i] : nullptr, "layers." + std::to_string(i) + ".", f);
    for (std::size_t i = 0; i < sp_.size(); ++i)
      visit_block(sp_[i], g ? &g->blocks[i] : nullptr, "layers." + std::to_string(i) + ".", f);
    visit_norm(final_, g ? &g->final_norm : nullptr, "final_norm", f);
  }

  template <class F>
  void visit_norm(Norm& n, const typename Norm::template ParamGrads<Replicated>* g, const std::string& name, F& f) {
    visit_norm_params(n, g, name, cfg_.hidden, f);
  }
  template <class Blk, class F>
  void visit_block(Blk& b, const BlockGrads* g, const std::string& pre, F& f) {
    visit_block_params(cfg_, group_.size(), b, g, pre, f);
  }

  /// Physical sharded tensor → its logical parts (gathered; verification-class traffic).
  template <class U, class L>
  static void unmap(const Sharded<U, L, B>& w, const TensorMap& m, const std::string& prefix, Masters& out) {
    const auto full = to_dense(w);  // [rows, cols] physical, every rank
    for (std::size_t k = 0; k < m.parts.size(); ++k)
      out[prefix + m.parts[k]] = Eigen::MatrixXd::Zero(m.rows, m.part_cols[k]);
    for (Index c = 0; c < w.cols(); ++c) {
      const auto lc = m(c);
      auto& dst = out[prefix + m.parts[static_cast<std::size_t>(lc.part)]];
      for (Index r = 0; r < m.rows; ++r) dst(r, lc.col) = static_cast<double>(full(r, c));
    }
  }
  /// Logical parts → this rank's block of a tensor shaped like `like`; rows ≥ m.rows are zero.
  template <class U = T, class L>
  static Sharded<U, L, B> remap(const Sharded<T, L, B>& like, const TensorMap& m, const std::string& prefix,
                                const Masters& in) {
    using shardalg::detail::cat;
    std::vector<const Eigen::MatrixXd*> parts;
    for (std::size_t k = 0; k < m.parts.size(); ++k) {
      auto it = in.find(prefix + m.parts[k]);
      if (it == in.end()) throw ShapeError(cat("Gpt: checkpoint has no tensor ", prefix + m.parts[k]));
      if (it->second.rows() != m.rows || it->second.cols() != m.part_cols[k])
        throw ShapeError(cat("Gpt: checkpoint tensor ", prefix + m.parts[k], " is ", it->second.rows(), "x",
                             it->second.cols(), ", expected ", m.rows, "x", m.part_cols[k]));
      parts.push_back(&it->second);
    }
    return from_global<U, L, B>(like.rows(), like.cols(), like.group(), [&](Index r, Index c) {
      if (r >= m.rows) return 0.0;
      const auto lc = m(c);
      return (*parts[static_cast<std::size_t>(lc.part)])(r, lc.col);
    });
  }

  GptConfig cfg_;
  Group group_;
  Emb emb_;
  std::vector<Plain> plain_;
  std::vector<Sp> sp_;
  Norm final_;
  Loss loss_;
  Dropout drop_emb_;
  int cp_size_ = 1;
  std::optional<Grads> grads_;
  /// main_grad: the accumulated gradients, each parameter's local block, keyed by ParamInfo::name.
  using Main = std::conditional_t<HostHalf<T>, float, T>;
  std::map<std::string, typename B::template matrix<Main>> main_;
  int micro_ = 0;             // micro-batches in main_
  bool grads_in_main_ = false;  // grads_ (the last forward_backward's) already added to main_
  long step_ = 0;
  long skipped_ = 0;
  bool last_skipped_ = false;
  double loss_scale_ = 1.0;
  bool check_finite_ = false;
  bool measure_ = false;  // measure_activations
  ActivationTerms held_;
};

// ---- Gpt's members defined outside the class: not inline, so that an explicit instantiation
// declaration (SHARDALG_EXTERN_TEMPLATES, below) keeps them out of a user's translation unit.

template <Element T, class B>
void Gpt<T, B>::check(const GptConfig& c, int p) {
    using shardalg::detail::cat;
    if (c.layers < 1) throw ShapeError(cat("Gpt: ", c.layers, " layers; a model needs at least 1"));
    if (c.batch < 1 || c.seq < 1)
      throw ShapeError(cat("Gpt: batch ", c.batch, " and sequence length ", c.seq, " must be positive"));
    if (c.hidden < 1) throw ShapeError(cat("Gpt: hidden size ", c.hidden, " must be positive"));
    const Index vp = padded_vocab(c.vocab, c.vocab_divisor, p);  // vocabulary and divisor ≥ 1, no overflow
    // Every size the model allocates, in bytes, must fit 64 bits: tokens × widest row × element size,
    // and the padded embedding.
    const Index widest = std::max({c.hidden, c.ffn_size() * (c.activation == Activation::swiglu ? 2 : 1), vp});
    Index tokens = 0, elems = 0, bytes = 0, emb = 0, emb_bytes = 0;
    if (__builtin_mul_overflow(c.batch, c.seq, &tokens) || __builtin_mul_overflow(tokens, widest, &elems) ||
        __builtin_mul_overflow(elems, static_cast<Index>(sizeof(T)), &bytes) ||
        __builtin_mul_overflow(vp, c.hidden, &emb) || __builtin_mul_overflow(emb, static_cast<Index>(sizeof(T)), &emb_bytes))
      throw ShapeError(cat("Gpt: batch ", c.batch, " × seq ", c.seq, " tokens × ", widest, " values × ", sizeof(T),
                           " bytes (or the ", vp, "x", c.hidden, " embedding) overflows 64-bit sizes"));
    if (!(std::isfinite(c.eps) && c.eps > 0)) throw ShapeError(cat("Gpt: eps ", c.eps, " must be positive and finite"));
    if (!(std::isfinite(c.init_std) && c.init_std >= 0))
      throw ShapeError(cat("Gpt: init_std ", c.init_std, " must be finite and not negative"));
    if (!(c.attn_dropout >= 0.0 && c.attn_dropout < 1.0))
      throw ShapeError(cat("Gpt: attn_dropout ", c.attn_dropout, " is outside [0, 1)"));
    Plain::check(c.block(0), p);                       // Attention: heads, groups; Mlp: ffn
    if (!(c.dropout >= 0.0 && c.dropout < 1.0))
      throw ShapeError(cat("Gpt: dropout ", c.dropout, " is outside [0, 1)"));
  }

template <Element T, class B>
Gpt<T, B> Gpt<T, B>::init(const GptConfig& c, const Group& g) {
    check(c, g.size());
    return Gpt(c, g);
  }

template <Element T, class B>
Gpt<T, B> Gpt<T, B>::from_masters(const GptConfig& c, const Masters& m, const Group& g) {
    auto model = init(c, g);
    model.load(m);
    return model;
  }

template <Element T, class B>
T Gpt<T, B>::forward_backward(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) {
    check_batch(tokens, targets);
    grads_.reset();
    grads_in_main_ = false;
    reseed();
    return cfg_.sp ? run<RowSharded>(sp_, tokens, targets, true) : run<Replicated>(plain_, tokens, targets, true);
  }

template <Element T, class B>
T Gpt<T, B>::loss(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) {
    check_batch(tokens, targets);
    reseed();
    return cfg_.sp ? run<RowSharded>(sp_, tokens, targets, false) : run<Replicated>(plain_, tokens, targets, false);
  }

template <Element T, class B>
template <class Opt>
double Gpt<T, B>::step(Opt& opt, double max_grad_norm) {
    check_step_grads();
    const double mean = micro_ > 0 ? 1.0 / micro_ : 1.0;  // the accumulated sums → their mean
    GradNorm gn;
    visit_step_grads([&](const ParamInfo& info, auto&, const auto& g) { gn.add(info, g); });
    const double norm = gn.finish() * mean;
    last_skipped_ = !std::isfinite(norm);
    if (last_skipped_) {  // a NaN or Inf gradient: apply nothing, count it; the caller sees the norm
      clear_step_grads();
      ++skipped_;
      return norm;
    }
    const double scale = clip_factor(norm, max_grad_norm) * mean;
    opt.begin_step();
    visit_step_grads([&](const ParamInfo& info, auto& w, const auto& g) { opt.update(info, w, g, scale); });
    clear_step_grads();
    ++step_;
    return norm;
  }

template <Element T, class B>
template <class Opt>
double Gpt<T, B>::step(Opt& opt, double max_grad_norm, LossScaler& scaler) {
    check_step_grads();
    if (loss_scale_ != scaler.scale())
      throw ShapeError(shardalg::detail::cat("Gpt: the gradients were made at loss scale ", loss_scale_,
                                             ", the scaler's is ", scaler.scale(), "; set_loss_scale(scaler.scale()) before forward_backward"));
    const double mean = micro_ > 0 ? 1.0 / micro_ : 1.0;  // the accumulated sums → their mean
    GradNorm gn;
    visit_step_grads([&](const ParamInfo& info, auto&, const auto& g) { gn.add(info, g); });
    const double s = loss_scale_, norm = gn.finish() * mean / s;
    last_skipped_ = !std::isfinite(norm);
    scaler.update(last_skipped_);
    if (last_skipped_) {  // an overflow: nothing applied, the scale backed off
      ++skipped_;
    } else {
      const double scale = clip_factor(norm, max_grad_norm) * mean / s;
      opt.begin_step();
      visit_step_grads([&](const ParamInfo& info, auto& w, const auto& g) { opt.update(info, w, g, scale); });
      ++step_;
    }
    clear_step_grads();
    loss_scale_ = scaler.scale();
    return norm;
  }

template <Element T, class B>
Masters Gpt<T, B>::masters() {
    Masters out;
    visit_params([&](const ParamInfo&, const TensorMap& m, auto& w) { unmap(w, m, "", out); });
    return out;
  }

template <Element T, class B>
void Gpt<T, B>::load(const Masters& in) {
    visit_params([&](const ParamInfo&, const TensorMap& m, auto& w) { w = remap(w, m, "", in); });
  }

template <Element T, class B>
Masters Gpt<T, B>::grad_masters() {
    Masters out;
    if (!grads_) throw ShapeError("Gpt: grad_masters() without gradients; call forward_backward first");
    visit_all(&*grads_, [&](const ParamInfo&, const TensorMap& m, auto&, const auto* g) { unmap(*g, m, "", out); });
    return out;
  }

template <Element T, class B>
void Gpt<T, B>::accumulate_gradients() {
    if (!grads_ || grads_in_main_)
      throw ShapeError(shardalg::detail::cat("Gpt: accumulate_gradients() without new gradients (", micro_,
                                             " accumulated); call forward_backward first"));
    visit([&](const ParamInfo& info, auto&, const auto& g) {
      auto add = B::template cast<Main>(g.local());  // 16-bit → fp32: exact
      if (auto it = main_.find(info.name); it != main_.end()) it->second += add;
      else main_.emplace(info.name, std::move(add));
    });
    grads_in_main_ = true;
    ++micro_;
  }

template <Element T, class B>
Masters Gpt<T, B>::main_grad_masters() {
    if (micro_ == 0) throw ShapeError("Gpt: main_grad_masters() without accumulated gradients; call accumulate_gradients first");
    Masters out;
    visit_all(&*grads_, [&](const ParamInfo& info, const TensorMap& m, auto&, const auto* g) {
      using L = typename std::remove_cvref_t<decltype(*g)>::layout;
      unmap(Sharded<Main, L, B>(main_.at(info.name), g->rows(), g->cols(), g->group()), m, "", out);
    });
    return out;
  }

template <Element T, class B>
Gpt<T, B>::Gpt(const GptConfig& c, const Group& g)
      : cfg_(c),
        group_(g),
        emb_(Emb::init(c.vocab, c.hidden, g, NormalInit{c.seed, c.init_std}, tensor_id(0, word_embedding_kind),
                       c.vocab_divisor)),
        final_(Norm::init(c.hidden, c.norm, g, T(c.eps))),
        loss_(c.vocab, CrossEntropyOptions{c.ignore_index, c.label_smoothing}),
        drop_emb_(c.dropout, c.seed, tensor_id(0, embedding_dropout_kind)) {
    const InitConfig ic{c.seed, c.init_std, static_cast<int>(c.layers), 0};
    for (Index l = 0; l < c.layers; ++l) {
      if (c.sp) sp_.push_back(Sp::init(c.block(static_cast<std::uint32_t>(l)), g, ic));
      else plain_.push_back(Plain::init(c.block(static_cast<std::uint32_t>(l)), g, ic));
    }
  }

template <Element T, class B>
void Gpt<T, B>::check_batch(std::span<const std::int64_t> tokens, std::span<const std::int64_t> targets) const {
    using shardalg::detail::cat;
    if (cp_size_ > 1 && static_cast<Index>(tokens.size()) != cfg_.tokens() / cp_size_)
      throw ShapeError(cat("Gpt: ", tokens.size(), " tokens, expected batch × seq / cp = ", cfg_.batch, " × ", cfg_.seq, " / ",
                           cp_size_, " = ", cfg_.tokens() / cp_size_));
    if (cp_size_ == 1 && static_cast<Index>(tokens.size()) != cfg_.tokens())
      throw ShapeError(cat("Gpt: ", tokens.size(), " tokens, expected batch × seq = ", cfg_.batch, " × ", cfg_.seq,
                           " = ", cfg_.tokens()));
    if (targets.size() != tokens.size())
      throw ShapeError(cat("Gpt: ", targets.size(), " targets for ", tokens.size(), " tokens"));
  }

}  // namespace shardalg::nn

#if defined(SHARDALG_EXTERN_TEMPLATES)
// shardalg::compiled (src/gpt.cpp) holds these instantiations: a program that links it
// compiles none of the model's code itself.
namespace shardalg::nn {
extern template class Gpt<float, CpuBackend>;
extern template class Gpt<double, CpuBackend>;
extern template double Gpt<float, CpuBackend>::step(Adam<float, CpuBackend>&, double);
extern template double Gpt<double, CpuBackend>::step(Adam<double, CpuBackend>&, double);
extern template double Gpt<float, CpuBackend>::step(Sgd<float, CpuBackend>&, double);
extern template double Gpt<double, CpuBackend>::step(Sgd<double, CpuBackend>&, double);
}  // namespace shardalg::nn
#endif
