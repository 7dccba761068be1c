// shardalg/nn/models/pipeline_gpt.hpp — nn::Gpt cut into pipeline stages: one rank's model chunks on a
// dp × pp × cp × tp mesh, composed from the layer classes (embedding, blocks, final norm, tied head,
// loss), for pipeline::Executor (it satisfies pipeline::StageModel).
//
//   Mesh mesh(world, {{"dp", 2}, {"pp", 2}, {"tp", 2}});
//   auto lay = pipeline::parse_layout("Et|tL", 2, cfg.layers);           // which layers each stage holds
//   auto model = nn::PipelineGpt<double>::init(cfg, lay, mesh);           // this rank's stages
//   model.set_microbatches(nn::split_microbatches(x, y, cfg.seq, m), nn::LossScaling::tokens, n);
//   pipeline::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"), pipeline::one_f_one_b(2, m), {});
//   ex.run(model);
//   double loss = model.finish();      // reductions; then model.grad_masters() / reduced_grads()
//   model.step(adam, 1.0);             // the optimizer on this rank's stages (norm over tp, then pp)
//
//   model.shard_optimizer_state();     // ZeRO-1, before the run: finish() leaves G[dp:Partial] …
//   model.step(sharded_adam, 1.0);     // … reduce_scatter<dp> per bucket, Adam on the slice, all_gather<dp>
//   model.shard_parameters();          // ZeRO-3: W_b[dp:C] between steps, gathered at the run's first forward
//
// Stage i of the layout (pp rank i mod PP, chunk i div PP) holds its layers in order:
//
//   E    ids → E[Row] lookup → Partial → all_reduce → X[R] (SP: reduce_scatter → X[Row]) → dropout
//   t    TransformerBlock X[R] → X[R] (SP: SequenceParallelBlock X[Row] → X[Row])
//   L    final norm; logits[C] = X[R]·Eᵀ[C] (SP: all_gather first); vocab-parallel cross-entropy
//
// and X[L] (L = R, or Row under SP) crosses to the next stage as it is (pipeline/p2p.hpp).
//
// Tied embeddings: the stage with E and the stage with L each hold a copy of E (the same values:
// initialised by global index, or loaded from the same master). Their gradients — the lookup's
// scatter-add and the head's dlogitsᵀ·X — are summed over the embedding group (pp ranks 0 and
// PP − 1; Megatron-LM's embedding group) by one all_reduce, so both copies get the whole
// gradient; on one rank the two parts are added locally.
//
// Backward. BW runs each layer's own backward (TransformerBlock::backward, …). B and W (zero-
// bubble schedules) split it: B computes the input gradients and keeps each linear layer's output
// gradient (nn/layers/split_backward.hpp), W the weight gradients from those and the forward caches; the
// head's dE = dlogitsᵀ·X and the lookup's scatter-add go to W as well.
//
// finish(), after the run: under SP the norms' Partial gradients are all-reduced over tp (once,
// after accumulating the micro-batches); the tied embedding over the embedding group; every
// gradient over dp ("dp.grads"); the loss over pp and dp ("pp.loss"). The gradients are then the
// whole global batch's (loss scaling: nn/models/pipeline_parts.hpp).
//
// Context parallelism (a cp axis of size C > 1): every stage's activations are X[cp:Row, tp:L],
// this rank's two chunks of every sequence (nn/layers/cp_tokens.hpp), and every block's attention
// runs over cp (ring or all-to-all: init's `cp_algo`). set_microbatches takes whole micro-batches
// and keeps this rank's chunks; the pp messages are then (seq / C) · sequences rows. The pp groups
// are the ranks of one (dp, cp, tp) coordinate, so the cp peers of a stage run the same schedule
// and meet in the same attention calls. Each cp rank's gradient is its summand (G[cp:Partial]);
// finish() reduces it with dp's in one all_reduce over the data group dp × cp, and the loss too.
// Per-micro-batch loss scaling divides by the micro-batch's counted targets over the whole
// sequence, not by this rank's share.
//
// Training (step): the global gradient norm is GradNorm's over tp on each rank's stages, summed over
// pp by one all_reduce of one value; the tied embedding is counted once (on E's rank: L's copy
// elsewhere has a zero norm weight) and both copies make the same update, as their gradients are
// equal after finish(). ZeRO with the pipeline is Megatron's distributed optimizer: each rank's
// stages' parameters in buckets (nn/optim/grad_buckets.hpp) over the data group; ZeRO-3 adds
// ParamShards (nn/models/zero3.hpp), gathered once per run, not per micro-batch — every
// micro-batch reads every parameter of the stage. ZeRO-2's per-bucket reduce-scatter during the
// backward does not apply: the gradients accumulate over the micro-batches, so they are reduced
// once, in the step.
//
// Sequence lengths: a micro-batch of another length than the config's runs on copies of the
// stage's blocks whose attention is configured for it (the same weights, copied once per length
// and run: the attention's sequence length is part of its config).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/mesh/mesh.hpp"
#include "shardalg/nn/models/gpt_stages.hpp"
#include "shardalg/nn/models/pipeline_parts.hpp"
#include "shardalg/nn/models/zero3.hpp"
#include "shardalg/nn/optim/grad_buckets.hpp"
#include "shardalg/nn/optim/sharded_adam.hpp"
#include "shardalg/pipeline/stage_assignment.hpp"
#include "shardalg/pipeline/p2p.hpp"

namespace shardalg::nn {

template <Element T, bool SP = false, class B = CpuBackend>
class PipelineGpt {
 public:
  using L = std::conditional_t<SP, RowSharded, Replicated>;
  using Act = Sharded<T, L, B>;
  using Block = std::conditional_t<SP, SequenceParallelBlock<T, B>, TransformerBlock<T, B>>;
  using Plain = TransformerBlock<T, B>;
  using Emb = VocabParallelEmbedding<T, B>;
  using Loss = VocabParallelCrossEntropy<T, B>;
  using Norm = LayerNorm<T, B>;
  using Logits = Sharded<T, ColSharded, B>;
  using Grads = typename Plain::ParamGrads;  // every gradient in its parameter's layout

  /// One stage: stage = chunk·PP + pp rank.
  struct Chunk {
    int stage = 0;
    bool embedding = false, loss = false;
    std::vector<Index> layers;  // global decoder ids
    std::vector<Block> blocks;
    std::map<Index, std::vector<Block>> by_seq;  // copies for other sequence lengths (this run)
    std::optional<Emb> emb;                      // the stage with E, and the stage with L (tied)
    std::optional<Norm> final_norm;
    // gradients, accumulated over micro-batches (under SP the norms' still Partial)
    std::vector<std::optional<typename Block::ParamGrads>> acc;
    std::optional<typename Emb::Weight> demb;
    std::optional<typename Norm::template ParamGrads<L>> dfinal;
    // after finish()
    std::vector<Grads> grads;
    std::optional<typename Norm::template ParamGrads<Replicated>> final_grads;
  };

  /// What one (micro-batch, chunk) keeps from its F to its backward.
  struct State {
    std::optional<typename Emb::Cache> emb;
    std::vector<typename Block::Cache> caches;
    std::optional<typename Norm::template Cache<L>> fn;
    std::optional<typename Emb::HeadCache> head;
    std::optional<typename Loss::Cache> loss;
    // kept by B for W
    std::vector<std::optional<BlockWeightWork<Block>>> work;
    std::optional<Act> demb_y;     // the embedding output's gradient (the lookup's scatter-add)
    std::optional<Logits> dlogits;  // the head's dE = dlogitsᵀ·X
  };

  /// This rank's stages of `lay` (PP = lay.pp = the mesh's pp size; layers = cfg.layers),
  /// initialised by global index as nn::Gpt, or from logical masters (Gpt's names). The mesh has
  /// axes pp and tp, and optionally dp and cp (attention over cp by `cp_algo`); collective over
  /// the world (the embedding group's and the data group's splits).
  static PipelineGpt init(const GptConfig& c, const pipeline::LayerLayout& lay, const Mesh& mesh,
                          const Masters* masters = nullptr, CpAlgo cp_algo = CpAlgo::ring);

  [[nodiscard]] const GptConfig& config() const { return cfg_; }
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  [[nodiscard]] const std::vector<Chunk>& chunks() const { return chunks_; }
  [[nodiscard]] int chunk_count() const { return static_cast<int>(chunks_.size()); }
  /// The micro-batches set_microbatches gave (the schedule's m must equal it).
  [[nodiscard]] int microbatch_count() const { return static_cast<int>(mbs_.size()); }

  /// The dropout masks' seed: nn::Gpt's for optimizer step `step` (the same masks).
  void set_step(long step) {
    seed_ = cfg_.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(step + 1));
    for (auto& ch : chunks_)
      for (auto& b : ch.blocks) b.set_dropout_seed(seed_);
  }

  /// This replica's micro-batches for the next run, whole sequences (under cp this rank keeps its
  /// chunks). `global_count`: the counted targets of the whole global batch (every replica), for
  /// LossScaling::tokens. Resets the gradients.
  void set_microbatches(std::vector<MicroBatch> mbs, LossScaling scaling, Index global_count = 0);

  // ---- pipeline::StageModel ------------------------------------------------------------------
  [[nodiscard]] Group tp() const { return mesh_.group("tp"); }
  [[nodiscard]] pipeline::ActShape shape(int mb) const {
    const auto& b = mbs_.at(static_cast<std::size_t>(mb));
    return {b.seq / cp_size(), b.sequences, cfg_.hidden};  // this rank's rows: seq / cp of each sequence
  }

  std::optional<Act> forward(int chunk, int mb, std::optional<Act> in, State& st);

  /// BW (`weights`) or B.
  std::optional<Act> backward(int chunk, int mb, State& st, std::optional<Act> dy, bool weights);

  /// W: the weight gradients B left (blocks, the head's dE, the lookup's dE).
  void weights(int chunk, int mb, State& st);

  [[nodiscard]] std::size_t bytes(const State& st) const;

  // ---- after the run ----------------------------------------------------------------------
  /// Reduce the gradients and the loss (see the top of the file); returns the global batch's
  /// loss, on every rank. Collective over the mesh.
  T finish();

  /// This rank's loss contribution before finish (the sum over its micro-batches on the last stage).
  [[nodiscard]] T local_loss() const { return loss_; }
  /// This rank's gradients under Gpt's logical names (after finish; gathers over tp): the
  /// embedding on the stages that hold E, its layers, the final norm on the stage with L.
  Masters grad_masters() const;

  // ---- training: one optimizer step after finish() -------------------------------------------
  /// This rank's parameters and, after finish(), their gradients: f(info, map, w, g*) under
  /// nn::Gpt's names (nn/models/gpt_params.hpp), g* null before finish. The tied embedding: a rank
  /// holding both copies (E's and L's stage) visits E's; a rank holding L's copy alone visits it with
  /// a zero norm weight, so that the global norm counts the embedding once (on E's rank).
  template <class F>
  void visit(F&& f);
  /// One optimizer step (Adam, Sgd) on this rank's stages, after finish(): the global gradient norm
  /// (GradNorm over tp, then one all_reduce of one value over pp; the data group's reduction was
  /// finish()'s), clipping by it (max_grad_norm ≤ 0: none), the update; a rank holding both copies of
  /// the embedding copies E's to L's. Returns the norm before clipping; a non-finite norm skips the
  /// update on every rank. The next run starts from set_microbatches.
  template <class Opt>
  double step(Opt& opt, double max_grad_norm = 0.0);

  /// ZeRO-1 with the pipeline (Megatron's distributed optimizer): call before the run. finish() then
  /// leaves every gradient this replica's summand, G[dp:Partial] (the data group's all_reduce is not
  /// made), and step(ShardedAdam) reduce-scatters them per bucket over the data group (dp, or dp × cp)
  /// instead: G_b[dp:Partial] → reduce_scatter<dp, C> → G_b[dp:C]; Adam on this rank's slice (its
  /// moments only: 2·e·Σ⌈n_b/D⌉ bytes); W_b[dp:C] → all_gather<dp> → W_b[dp:R]. The buckets are this
  /// rank's stages' parameters (nn/optim/grad_buckets.hpp), at most `bucket_elements` values each.
  /// ZeRO-2 and ZeRO-3 do not compose with the pipeline: its gradients accumulate over the
  /// micro-batches and every micro-batch reads every parameter of the stage (docs/design.md §7).
  /// Throws ShapeError when the data group has one rank.
  void shard_optimizer_state(std::size_t bucket_elements = std::size_t{1} << 16);
  /// ZeRO-3 with the pipeline: shard_optimizer_state, and between steps this rank keeps only its
  /// slice of every parameter bucket, W_b[dp:C] (nn/models/zero3.hpp's ParamShards; the replica's
  /// blocks freed). The first forward of a run all_gather<dp>s every bucket of this rank's stages
  /// (once per run: every micro-batch reads every parameter of the stage, so gathering per
  /// micro-batch would multiply the all_gathers by m); finish() frees them again; the step updates
  /// the slices in place and gathers nothing. Call before the first run; collective over the data group.
  void shard_parameters(std::size_t bucket_elements = std::size_t{1} << 16);
  /// ZeRO-1's step (shard_optimizer_state): the same norm (from the slices), clipping and skip rule.
  /// With shard_parameters: the slices updated in place, no all_gather.
  double step(ShardedAdam<T, B>& opt, double max_grad_norm = 0.0);
  /// The parameter bytes this rank holds, from the storage: its stages' parameters' local blocks
  /// (the tied embedding once per copy) and, with shard_parameters, the slices.
  [[nodiscard]] std::size_t parameter_bytes() {
    std::size_t n = params_.slice_bytes();
    visit_params([&](const ParamInfo&, const TensorMap&, const auto& w) { n += static_cast<std::size_t>(w.local().size()) * sizeof(T); });
    const auto e = std::count_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c.embedding; });
    for (const auto& ch : chunks_)  // L's copy of the embedding on E's rank (visit walks E's)
      if (ch.emb && !ch.embedding && e > 0) n += static_cast<std::size_t>(ch.emb->weight().local().size()) * sizeof(T);
    return n;
  }
  /// With shard_parameters: the most parameter bytes held during the last run (slices, the gathered
  /// stages and the bucket in flight).
  [[nodiscard]] std::size_t parameter_peak_bytes() const { return params_.peak_bytes(); }
  /// f(info, map, w) over visit's parameters (nn/models/zero3.hpp's ParamShards walks them).
  template <class F>
  void visit_params(F&& f) {
    visit([&](const ParamInfo& i, const TensorMap& m, auto& w, const auto*) { f(i, m, w); });
  }
  /// The bucket plan of shard_optimizer_state (made at the first ZeRO-1 step).
  [[nodiscard]] const BucketPlan& plan() const { return plan_; }

 private:
  PipelineGpt(const GptConfig& c, const pipeline::LayerLayout& lay, const Mesh& mesh, const Masters* m, CpAlgo cp_algo);

  [[nodiscard]] int dp_size() const { return mesh_.has("dp") ? mesh_.size("dp") : 1; }
  [[nodiscard]] int cp_size() const { return mesh_.has("cp") ? mesh_.size("cp") : 1; }
  Dropout emb_dropout(const MicroBatch& b) const {
    Dropout d(cfg_.dropout, seed_, tensor_id(0, embedding_dropout_kind));
    d.row_base = b.row_base;
    if (cp_size() > 1) d.cp = Dropout::CpRows{b.seq, cp_size(), mesh_.group("cp").rank()};
    return d;
  }
  /// What each counted token's loss is divided by: the global batch's count (per token), or
  /// m · dp · the micro-batch's count (per micro-batch; under cp its count over whole sequences).
  [[nodiscard]] T loss_denominator(int mb) const {
    if (scaling_ == LossScaling::tokens) return static_cast<T>(global_count_);
    return static_cast<T>(mbs_.size() * static_cast<std::size_t>(dp_size())) * static_cast<T>(counts_.at(static_cast<std::size_t>(mb)));
  }
  Logits loss_grad(const typename Loss::Cache& c, int mb) const {
    if (scaling_ == LossScaling::microbatches && cp_size() == 1)
      return loss_fn_.backward_mean(c, T(1) / static_cast<T>(mbs_.size() * static_cast<std::size_t>(dp_size())));
    const T den = loss_denominator(mb);
    auto g = B::template zeros<T>(c.probs.rows(), 1);
    for (Index i = 0; i < g.rows(); ++i) g(i, 0) = den > T(0) ? T(1) / den : T(0);
    return loss_fn_.backward(c, Sharded<T, Replicated, B>(std::move(g), c.probs.rows(), 1, c.probs.group()));
  }
  void embedding_grad(Chunk& ch, const typename Emb::Cache& c, const Act& dy) {
    auto eg = stages::embed_backward<SP>(*ch.emb, tp(), c, dy);
    detail::add_to(ch.demb, std::optional(std::move(eg.de)));
  }
  std::vector<Block>& blocks_for(Chunk& ch, Index seq);

  GptConfig cfg_;
  Mesh mesh_;
  Group emb_group_;
  Group data_;  // the gradients' and the loss's reduction group (dp × cp, dp-major), when dp · cp > 1
  CpAlgo cp_algo_ = CpAlgo::ring;
  std::vector<Chunk> chunks_;
  Loss loss_fn_;
  std::vector<MicroBatch> mbs_;  // under cp: seq and sequences whole, tokens and targets this rank's
  std::vector<Index> counts_;     // each micro-batch's counted targets, whole sequences
  LossScaling scaling_ = LossScaling::microbatches;
  Index global_count_ = 0;
  std::uint64_t seed_ = 0;
  T loss_ = T(0);
  bool zero_ = false;                 // shard_optimizer_state: finish() leaves the summands
  std::size_t bucket_elements_ = 0;
  BucketPlan plan_;                   // ZeRO-1's buckets (this rank's stages' parameters)
  ParamShards<T, B> params_;          // ZeRO-3 (shard_parameters): W_b[dp:C]

  void ensure_plan() {
    if (!plan_.slots.empty()) return;
    std::vector<BucketSlot> slots;
    visit([&](const ParamInfo& i, const TensorMap&, auto& w, const auto*) { slots.push_back(slot_of(i, w)); });
    plan_ = BucketPlan::backward_order(std::move(slots), bucket_elements_, data_.size());
  }
  /// The tied copies on a rank with both E's and L's stage: L's is E's (visit walks E's only).
  void sync_tied() {
    Chunk* first = nullptr;
    Chunk* last = nullptr;
    for (auto& ch : chunks_) {
      if (ch.embedding) first = &ch;
      if (ch.loss) last = &ch;
    }
    if (first && last && first != last) last->emb->weight() = first->emb->weight();
  }
  /// ZeRO-3: the first forward of a run gathers this rank's stages (scope dp.params).
  void gather_params() {
    if (!params_.active() || params_.gathered()) return;
    auto sc = scope(data_, "dp.params");
    params_.gather(*this, plan_);
    sync_tied();
  }
  void release_params() {
    if (!params_.active()) return;
    params_.release_all();
    sync_tied();  // L's copy of a released E: 0 × 0 too
  }

  void require_finished(const char* what) const {
    for (const auto& ch : chunks_)
      if (ch.grads.size() != ch.blocks.size() || (ch.loss && !ch.final_grads))
        throw ShapeError(shardalg::detail::cat("PipelineGpt::", what, ": no gradients; run the schedule and finish() first"));
  }
  /// After an update: a rank with both E's and L's stage copies E's weight to L's; the gradients go.
  void end_step() {
    sync_tied();
    for (auto& ch : chunks_) {
      ch.grads.clear();
      ch.final_grads.reset();
      ch.demb.reset();
    }
  }
};

// ---- PipelineGpt's members defined outside the class (not inline: see nn/models/gpt.hpp).
template <Element T, bool SP, class B>
PipelineGpt<T, SP, B> PipelineGpt<T, SP, B>::init(const GptConfig& c, const pipeline::LayerLayout& lay, const Mesh& mesh, const Masters* masters,
                                                  CpAlgo cp_algo) {
    using shardalg::detail::cat;
    if (!mesh.has("pp") || !mesh.has("tp"))
      throw MeshError(cat("PipelineGpt: the mesh ", mesh.describe(), " needs the axes pp and tp"));
    for (const auto& a : mesh.axes())
      if (a.name != "dp" && a.name != "pp" && a.name != "cp" && a.name != "tp" && a.size != 1)
        throw MeshError(cat("PipelineGpt: axis ", a.name, " of size ", a.size, " is not supported (dp, pp, cp, tp)"));
    if (lay.pp != mesh.size("pp"))
      throw pipeline::PipelineLayoutError(cat("pipeline layout \"", lay.text, "\" is for ", lay.pp,
                                              " pipeline ranks, the mesh has pp = ", mesh.size("pp")));
    if (lay.count(pipeline::LayerType::decoder) != c.layers)
      throw pipeline::PipelineLayoutError(cat("pipeline layout \"", lay.text, "\": ", lay.count(pipeline::LayerType::decoder),
                                              " decoder layers 't', the model has ", c.layers));
    pipeline::check_buildable(lay);
    Gpt<T, B>::check(c, mesh.size("tp"));
    if (mesh.has("cp")) CpTokens::check(c.seq, mesh.size("cp"));
    return PipelineGpt(c, lay, mesh, masters, cp_algo);
  }

template <Element T, bool SP, class B>
void PipelineGpt<T, SP, B>::set_microbatches(std::vector<MicroBatch> mbs, LossScaling scaling, Index global_count) {
    using shardalg::detail::cat;
    const int cp = cp_size();
    std::vector<Index> counts;
    for (std::size_t j = 0; j < mbs.size(); ++j) {
      auto& b = mbs[j];
      if (b.seq < 1 || b.sequences < 1 || static_cast<Index>(b.tokens.size()) != b.rows() || b.targets.size() != b.tokens.size())
        throw ShapeError(cat("PipelineGpt: micro-batch ", j, " has ", b.tokens.size(), " tokens and ", b.targets.size(),
                             " targets for ", b.sequences, " sequences of ", b.seq));
      if (cp > 1 && b.seq % (2 * Index{cp}) != 0)
        throw DivisibilityError(cat("PipelineGpt: micro-batch ", j, " has sequences of ", b.seq, ", not divisible by 2·cp = ", 2 * cp,
                                    " (context parallelism: two chunks per rank)"));
      Index n = 0;
      for (auto y : b.targets) n += y != cfg_.ignore_index;
      counts.push_back(n);
      if (cp > 1) {  // this rank's two chunks of every sequence
        const CpTokens tok{b.seq, b.sequences, cp, mesh_.group("cp").rank()};
        std::vector<std::int64_t> x(static_cast<std::size_t>(tok.rows())), y(x.size());
        for (Index i = 0; i < tok.rows(); ++i) {
          x[static_cast<std::size_t>(i)] = b.tokens[static_cast<std::size_t>(tok.global_row(i))];
          y[static_cast<std::size_t>(i)] = b.targets[static_cast<std::size_t>(tok.global_row(i))];
        }
        b.tokens = std::move(x);
        b.targets = std::move(y);
      }
    }
    if (scaling == LossScaling::tokens && global_count < 1)
      throw ShapeError(cat("PipelineGpt: per-token loss scaling needs the global batch's target count, got ", global_count));
    mbs_ = std::move(mbs);
    counts_ = std::move(counts);
    scaling_ = scaling;
    global_count_ = global_count;
    loss_ = T(0);
    for (auto& ch : chunks_) {
      ch.by_seq.clear();
      ch.acc.assign(ch.blocks.size(), std::nullopt);
      ch.demb.reset();
      ch.dfinal.reset();
      ch.grads.clear();
      ch.final_grads.reset();
    }
  }

template <Element T, bool SP, class B>
auto PipelineGpt<T, SP, B>::forward(int chunk, int mb, std::optional<Act> in, State& st) -> std::optional<Act> {
    gather_params();  // ZeRO-3: the first forward of the run
    Chunk& ch = chunks_.at(static_cast<std::size_t>(chunk));
    const MicroBatch& b = mbs_.at(static_cast<std::size_t>(mb));
    Act x;
    if (ch.embedding) {
      auto ef = stages::embed<SP>(*ch.emb, tp(), b.tokens);
      st.emb = std::move(ef.cache);
      x = emb_dropout(b).forward(ef.y);
    } else {
      x = std::move(*in);
    }
    auto& blocks = blocks_for(ch, b.seq);
    x = stages::blocks_forward(
        blocks, std::move(x), st.caches, tp(), [&](std::size_t k) { return ch.layers[k]; },
        [&](std::size_t, Block& blk) { blk.set_dropout_row_base(b.row_base); }, [](std::size_t, const Act&) {});
    if (!ch.loss) return x;
    auto fn = ch.final_norm->forward(x);
    auto head = stages::head<SP>(*ch.emb, tp(), fn.y);
    auto l = stages::loss(loss_fn_, tp(), head.logits, b.targets);
    if (scaling_ == LossScaling::microbatches && cp_size() == 1) {
      loss_ += l.mean / static_cast<T>(mbs_.size() * static_cast<std::size_t>(dp_size()));
    } else {  // Σ this rank's token losses ÷ the denominator (LossScaling::tokens: as before)
      const T den = loss_denominator(mb);
      loss_ += den > T(0) ? l.losses.local().sum() / den : T(0);
    }
    st.fn = std::move(fn.cache);
    st.head = std::move(head.cache);
    st.loss = std::move(l.cache);
    return std::nullopt;
  }

template <Element T, bool SP, class B>
auto PipelineGpt<T, SP, B>::backward(int chunk, int mb, State& st, std::optional<Act> dy, bool weights) -> std::optional<Act> {
    Chunk& ch = chunks_.at(static_cast<std::size_t>(chunk));
    const MicroBatch& b = mbs_.at(static_cast<std::size_t>(mb));
    Act g;
    if (ch.loss) {
      Logits dz = loss_grad(*st.loss, mb);
      st.loss.reset();
      Act gx;
      {
        if (weights) {
          auto hg = stages::head_backward<SP>(*ch.emb, tp(), *st.head, dz);
          detail::add_to(ch.demb, std::optional(std::move(hg.params.de)));
          gx = std::move(hg.dx);
          st.head.reset();
        } else {  // B: the input gradient only; dE = dlogitsᵀ·X waits for W
          auto s = scope(tp(), "head");
          Sharded<T, Partial, B> dxp = matmul(dz, ch.emb->weight());  // dlogits[C]·E[Row] → Partial
          if constexpr (SP) gx = adjoint::all_gather<RowSharded>(dxp);  // reduce_scatter T·h
          else gx = adjoint::copy_to(std::move(dxp));                   // all_reduce T·h
          st.dlogits = std::move(dz);
        }
      }
      auto fg = ch.final_norm->backward(*st.fn, gx);  // γ, β gradients (column sums) here, in B
      st.fn.reset();
      if (ch.dfinal) detail::add_norm(*ch.dfinal, std::move(fg.params));
      else ch.dfinal = std::move(fg.params);
      g = std::move(fg.dx);
    } else {
      g = std::move(*dy);
    }
    auto& blocks = blocks_for(ch, b.seq);
    st.work.resize(blocks.size());
    for (std::size_t k = blocks.size(); k-- > 0;) {
      auto s = scope(tp(), "layer" + std::to_string(ch.layers[k]));
      blocks[k].set_dropout_row_base(b.row_base);
      if (weights) {
        auto gr = blocks[k].backward(st.caches[k], g);
        g = std::move(gr.dx);
        detail::add_block(ch.acc[k], std::move(gr.params));
        st.caches[k] = {};
      } else {
        if (st.caches[k].input) st.caches[k] = blocks[k].restore(st.caches[k]);  // full recomputation: W needs the caches too
        auto bi = backward_input(blocks[k], st.caches[k], g, b.row_base);
        g = std::move(bi.dx);
        st.work[k] = std::move(bi.work);
      }
    }
    if (!ch.embedding) return g;
    Act dye = emb_dropout(b).backward(g);
    if (weights) embedding_grad(ch, *st.emb, dye);
    else st.demb_y = std::move(dye);
    return std::nullopt;
  }

template <Element T, bool SP, class B>
void PipelineGpt<T, SP, B>::weights(int chunk, int mb, State& st) {
    Chunk& ch = chunks_.at(static_cast<std::size_t>(chunk));
    const MicroBatch& b = mbs_.at(static_cast<std::size_t>(mb));
    auto& blocks = blocks_for(ch, b.seq);
    for (std::size_t k = blocks.size(); k-- > 0;) {
      if (!st.work[k]) continue;
      auto s = scope(tp(), "layer" + std::to_string(ch.layers[k]));
      detail::add_block(ch.acc[k], backward_weights(blocks[k], st.caches[k], std::move(*st.work[k])));
      st.work[k].reset();
      st.caches[k] = {};
    }
    if (st.dlogits) {
      auto s = scope(tp(), "head");
      typename Emb::Weight de = matmul(transpose(*st.dlogits), st.head->x);  // dlogitsᵀ[Row]·X[R] → Row
      detail::add_to(ch.demb, std::optional(std::move(de)));
      st.dlogits.reset();
      st.head.reset();
    }
    if (st.demb_y) {
      embedding_grad(ch, *st.emb, *st.demb_y);
      st.demb_y.reset();
    }
  }

template <Element T, bool SP, class B>
std::size_t PipelineGpt<T, SP, B>::bytes(const State& st) const {
    using detail::pp::local_bytes;
    std::size_t n = 0;
    if (st.emb) n += st.emb->ids.size() * sizeof(std::int64_t);
    for (const auto& c : st.caches) n += detail::pp::block_cache_bytes(c);
    if (st.fn) n += local_bytes(st.fn->xhat) + detail::pp::matrix_bytes(st.fn->rstd);
    if (st.head) n += local_bytes(st.head->x);
    if (st.loss) n += local_bytes(st.loss->probs) + st.loss->targets.size() * sizeof(std::int64_t) + st.loss->active.size();
    for (const auto& w : st.work)
      if (w) n += w->bytes();
    if (st.demb_y) n += local_bytes(*st.demb_y);
    if (st.dlogits) n += local_bytes(*st.dlogits);
    return n;
  }

// ---- out of line ---------------------------------------------------------------------------

template <Element T, bool SP, class B>
PipelineGpt<T, SP, B>::PipelineGpt(const GptConfig& c, const pipeline::LayerLayout& lay, const Mesh& mesh,
                                   const Masters* m, CpAlgo cp_algo)
    : cfg_(c), mesh_(mesh), cp_algo_(cp_algo), loss_fn_(c.vocab, CrossEntropyOptions{c.ignore_index, c.label_smoothing}) {
  const Group& pp = mesh_.group("pp");
  const Group& t = mesh_.group("tp");
  const int r = pp.rank(), p = pp.size();
  // Megatron-LM's embedding group: the first and the last pp rank (the stages with E and L).
  emb_group_ = pp.split(r == 0 || r == p - 1 ? 0 : 1, r, "embedding");
  // The data group: the ranks of this (pp, tp) coordinate, dp-major (dp × cp; dp alone without cp).
  if (cp_size() > 1)
    data_ = mesh_.world().split(r * t.size() + t.rank(), (mesh_.has("dp") ? mesh_.coord("dp") : 0) * cp_size() + mesh_.coord("cp"), "dp");
  else if (dp_size() > 1)
    data_ = mesh_.group("dp");
  const InitConfig ic{c.seed, c.init_std, static_cast<int>(c.layers), 0};
  const auto master = [&](const std::string& n) -> const Eigen::MatrixXd* {
    if (!m) return nullptr;
    auto it = m->find(n);
    if (it == m->end()) throw ShapeError(shardalg::detail::cat("PipelineGpt: the masters have no tensor ", n));
    return &it->second;
  };
  for (int v = 0; v < lay.vpp; ++v) {
    Chunk ch;
    ch.stage = lay.stage_index(r, v);
    for (auto type : lay.at(r, v)) {
      ch.embedding = ch.embedding || type == pipeline::LayerType::embedding;
      ch.loss = ch.loss || type == pipeline::LayerType::loss;
    }
    for (int id : lay.layer_ids(pipeline::LayerType::decoder, r, v)) {
      ch.layers.push_back(id);
      const BlockConfig bc = c.block(static_cast<std::uint32_t>(id));
      ch.blocks.push_back(m ? Block::from_dense(bc, detail::block_masters(*m, id), t) : Block::init(bc, t, ic));
    }
    if (ch.embedding || ch.loss)
      ch.emb.emplace(m ? Emb::from_dense(*master("embedding"), t, c.vocab_divisor)
                       : Emb::init(c.vocab, c.hidden, t, NormalInit{c.seed, c.init_std}, tensor_id(0, word_embedding_kind),
                                   c.vocab_divisor));
    if (ch.loss) {
      if (m) {
        const auto* beta = c.norm == NormKind::layer ? master("final_norm.beta") : nullptr;
        ch.final_norm.emplace(Norm::from_dense(*master("final_norm.gamma"), beta, c.norm, t, T(c.eps)));
      } else {
        ch.final_norm.emplace(Norm::init(c.hidden, c.norm, t, T(c.eps)));
      }
    }
    if (cp_size() > 1)
      for (auto& b : ch.blocks) b.set_context_parallel(mesh_.group("cp"), cp_algo_);
    chunks_.push_back(std::move(ch));
  }
  set_step(0);
}

template <Element T, bool SP, class B>
auto PipelineGpt<T, SP, B>::blocks_for(Chunk& ch, Index seq) -> std::vector<Block>& {
  if (seq == cfg_.seq) return ch.blocks;
  auto it = ch.by_seq.find(seq);
  if (it != ch.by_seq.end()) return it->second;
  std::vector<Block> copies;
  for (const auto& b : ch.blocks) {  // the same weights, the attention configured for `seq`
    BlockConfig bc = b.config();
    bc.seq = seq;
    auto ac = b.attention().config();
    ac.seq = seq;
    typename Block::Attn at(ac, b.attention().layout(), b.attention().qkv(), b.attention().proj());
    copies.emplace_back(bc, b.ln1(), std::move(at), b.ln2(), b.mlp());
    copies.back().set_dropout_seed(seed_);
    if (cp_size() > 1) copies.back().set_context_parallel(mesh_.group("cp"), cp_algo_);
  }
  return ch.by_seq.emplace(seq, std::move(copies)).first->second;
}

}  // namespace shardalg::nn

#include "shardalg/nn/models/pipeline_gpt_step.hpp"  // finish(), grad_masters(), visit(), step(), ZeRO

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/models.cpp (shardalg::compiled)
namespace shardalg::nn {
extern template class PipelineGpt<float, false, CpuBackend>;
extern template class PipelineGpt<float, true, CpuBackend>;
extern template class PipelineGpt<double, false, CpuBackend>;
extern template class PipelineGpt<double, true, CpuBackend>;
}  // namespace shardalg::nn
#endif
