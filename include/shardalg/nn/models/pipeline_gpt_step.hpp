// shardalg/nn/models/pipeline_gpt_step.hpp — nn::PipelineGpt after the run: finish() (the reductions
// over tp, the embedding group, the data group and pp), grad_masters(), and the optimizer step —
// Adam or SGD, ZeRO-1 (shard_optimizer_state) and ZeRO-3 (shard_parameters). The class and what
// these members do are in pipeline_gpt.hpp, which includes this file at its end; it is not
// included on its own.
#pragma once

namespace shardalg::nn {

template <Element T, bool SP, class B>
T PipelineGpt<T, SP, B>::finish() {
  using shardalg::detail::cat;
  const Group& pp = mesh_.group("pp");
  const int r = pp.rank(), p = pp.size();
  // 1. Under SP the norms' gradients are Partial on tp: one all_reduce each (γ ‖ β).
  for (auto& ch : chunks_) {
    for (std::size_t k = 0; k < ch.blocks.size(); ++k) {
      if (!ch.acc[k]) throw ShapeError(cat("PipelineGpt::finish: layer ", ch.layers[k], " has no gradient (run first)"));
      if constexpr (SP) ch.grads.push_back(ch.blocks[k].reduce_grads(std::move(*ch.acc[k])));
      else ch.grads.push_back(std::move(*ch.acc[k]));
      ch.acc[k].reset();
    }
    if (ch.loss) {
      if (!ch.dfinal) throw ShapeError("PipelineGpt::finish: the final norm has no gradient (run first)");
      if constexpr (SP) {
        auto s = scope(tp(), "norm_grads");
        ch.final_grads = Block::reduce_norm(std::move(*ch.dfinal));
      } else {
        ch.final_grads = std::move(*ch.dfinal);
      }
      ch.dfinal.reset();
    }
  }
  // 2. The tied embedding: lookup part (stage with E) + head part (stage with L).
  Chunk* first = nullptr;
  Chunk* last = nullptr;
  for (auto& ch : chunks_) {
    if (ch.embedding) first = &ch;
    if (ch.loss) last = &ch;
  }
  if (first && last && first != last) {  // both on this rank (p = 1 with chunks): add locally
    auto sum = *first->demb + *last->demb;
    first->demb = sum;
    last->demb = std::move(sum);
  } else if (p > 1 && (first || last)) {
    Chunk* ch = first ? first : last;
    auto s = scope(pp, "pp.embedding_grads");
    Group g = emb_group_;
    g.all_reduce(ch->demb->local().data(), static_cast<std::size_t>(ch->demb->local().size()), dtype_of<T>,
                 ReduceOp::sum, CallInfo{"Partial", "R"});
  }
  (void)r;
  // 3. Data (and context) parallelism: every gradient is this rank's summand of the global batch's
  //    (with shard_optimizer_state it stays one: step(ShardedAdam) reduce-scatters it).
  if (dp_size() * cp_size() > 1 && !zero_) {
    Group d = data_;
    auto s = scope(d, "dp.grads");
    const auto reduce = [&](auto& x) {
      d.all_reduce(x.local().data(), static_cast<std::size_t>(x.local().size()), dtype_of<T>, ReduceOp::sum,
                   CallInfo{"Partial", "R"});
    };
    const auto reduce_opt = [&](auto& x) {
      if (x) reduce(*x);
    };
    for (auto& ch : chunks_) {
      for (auto& g : ch.grads) {
        reduce(g.ln1.dgamma), reduce_opt(g.ln1.dbeta), reduce(g.attn.qkv.dw), reduce_opt(g.attn.qkv.db);
        reduce(g.attn.proj.dw), reduce_opt(g.attn.proj.db), reduce(g.ln2.dgamma), reduce_opt(g.ln2.dbeta);
        reduce(g.mlp.fc1.dw), reduce_opt(g.mlp.fc1.db), reduce(g.mlp.fc2.dw), reduce_opt(g.mlp.fc2.db);
      }
      if (ch.demb && (ch.embedding || !first)) reduce(*ch.demb);  // one copy per rank is reduced …
      if (ch.final_grads) reduce(ch.final_grads->dgamma), reduce_opt(ch.final_grads->dbeta);
    }
    if (first && last && first != last) last->demb = first->demb;  // … the other is the same tensor
  }
  release_params();  // ZeRO-3: the stages' parameters are slices again until the next run
  // 4. The loss: on the last stage's ranks; summed over pp (the others hold 0) and dp × cp.
  T loss = loss_;
  {
    auto s = scope(pp, "pp.loss");
    if (p > 1) {
      Group g = pp;
      g.all_reduce(&loss, 1, dtype_of<T>, ReduceOp::sum, CallInfo{"Partial", "R"});
    }
    if (dp_size() * cp_size() > 1) {
      Group d = data_;
      d.all_reduce(&loss, 1, dtype_of<T>, ReduceOp::sum, CallInfo{"Partial", "R"});
    }
  }
  return loss;
}

template <Element T, bool SP, class B>
template <class F>
void PipelineGpt<T, SP, B>::visit(F&& f) {
  const bool e_here = std::any_of(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c.embedding; });
  const int t = tp().size();
  for (auto& ch : chunks_) {
    if (ch.emb && (ch.embedding || !e_here)) {
      ParamInfo info{"embedding.weight", true, {}};
      if (!ch.embedding) info.col_weight = [](Index) { return 0.0; };  // counted on E's rank
      f(info, TensorMap{{"embedding"}, {cfg_.hidden}, cfg_.vocab, {}}, ch.emb->weight(), ch.demb ? &*ch.demb : nullptr);
    }
    for (std::size_t k = 0; k < ch.blocks.size(); ++k)
      visit_block_params(cfg_, t, ch.blocks[k], k < ch.grads.size() ? &ch.grads[k] : nullptr,
                         "layers." + std::to_string(ch.layers[k]) + ".", f);
    if (ch.final_norm)
      visit_norm_params(*ch.final_norm, ch.final_grads ? &*ch.final_grads : nullptr, "final_norm", cfg_.hidden, f);
  }
}

template <Element T, bool SP, class B>
template <class Opt>
double PipelineGpt<T, SP, B>::step(Opt& opt, double max_grad_norm) {
  if (zero_)
    throw ShapeError("PipelineGpt: with shard_optimizer_state the gradients are this replica's summands; step with a ShardedAdam");
  require_finished("step");
  GradNorm gn;
  visit([&](const ParamInfo& i, const TensorMap&, auto&, const auto* g) {
    if (g) gn.add(i, *g);
  });
  const double norm = gn.finish(mesh_.group("pp"));
  if (!std::isfinite(norm)) {
    end_step();
    return norm;
  }
  const double scale = clip_factor(norm, max_grad_norm);
  opt.begin_step();
  visit([&](const ParamInfo& i, const TensorMap&, auto& w, const auto* g) {
    if (g) opt.update(i, w, *g, scale);
  });
  end_step();
  return norm;
}

template <Element T, bool SP, class B>
void PipelineGpt<T, SP, B>::shard_optimizer_state(std::size_t bucket_elements) {
  if (dp_size() * cp_size() < 2)
    throw ShapeError(shardalg::detail::cat("PipelineGpt::shard_optimizer_state: the data group (dp × cp) has ",
                                           dp_size() * cp_size(), " rank; ZeRO-1 shards over two or more"));
  zero_ = true;
  bucket_elements_ = bucket_elements;
  plan_ = BucketPlan{};
}

template <Element T, bool SP, class B>
void PipelineGpt<T, SP, B>::shard_parameters(std::size_t bucket_elements) {
  shard_optimizer_state(bucket_elements);
  ensure_plan();
  params_.shard(*this, plan_, data_);
  sync_tied();
}

template <Element T, bool SP, class B>
double PipelineGpt<T, SP, B>::step(ShardedAdam<T, B>& opt, double max_grad_norm) {
  using Mat = typename B::template matrix<T>;
  if (!zero_)
    throw ShapeError("PipelineGpt: step(ShardedAdam) needs shard_optimizer_state() before the run (finish() all-reduced "
                     "the gradients over the data group)");
  require_finished("step");
  const Group& dpg = data_;
  const int d = dpg.size(), r = dpg.rank();
  ensure_plan();
  if (!opt.bound()) opt.bind(plan_, d, r);
  // G_b[dp:Partial] → reduce_scatter<dp, C> → G_b[dp:C], bucket by bucket as the visit fills them.
  std::vector<Mat> flat, gslice(plan_.buckets());
  for (Index n : plan_.padded) flat.push_back(Mat::Zero(1, n));  // zeros in the padding
  std::size_t k = 0;
  {
    auto sc = scope(dpg, "dp.grads");
    visit([&](const ParamInfo&, const TensorMap&, auto&, const auto* g) {
      const auto& s = plan_.slots[k++];
      pack(g->local(), s, flat[s.bucket]);
      if (k == plan_.slots.size() || plan_.slots[k].bucket != s.bucket) {
        MeshSharded<T, Axes<On<dp, Partial>>, B> bucket(std::move(flat[s.bucket]), 1, plan_.padded[s.bucket], {dpg});
        gslice[s.bucket] = reduce_scatter<dp, ColSharded>(bucket).local();
      }
    });
  }
  double norm = 0;
  {
    auto sc = scope(tp(), "grad_norm");
    const Group pp = mesh_.group("pp");
    norm = sliced_grad_norm(plan_, gslice, dpg, tp(), &pp);
  }
  if (!std::isfinite(norm)) {
    end_step();
    return norm;
  }
  const double scale = clip_factor(norm, max_grad_norm);
  opt.begin_step();
  {  // ZeRO-3: the slices W_b[dp:C] updated in place; ZeRO-1: this rank's slice, then all_gather<dp>
    auto sc = scope(dpg, "dp.params");
    sharded_update(opt, plan_, dpg, gslice, scale, params_.active() ? &params_.slices() : nullptr,
                   [&](auto&& f) { visit_params(f); });
  }
  end_step();
  return norm;
}

template <Element T, bool SP, class B>
Masters PipelineGpt<T, SP, B>::grad_masters() const {
  Masters out;
  const int t = tp().size();
  const QkvLayout lay{cfg_.heads, cfg_.groups == 0 ? cfg_.heads : cfg_.groups, cfg_.hidden / cfg_.heads, t};
  for (const auto& ch : chunks_) {
    if (ch.grads.size() != ch.blocks.size()) throw ShapeError("PipelineGpt::grad_masters: call finish() first");
    for (std::size_t k = 0; k < ch.blocks.size(); ++k) detail::unmap_block(ch.grads[k], cfg_, lay, t, ch.layers[k], out);
    if (ch.demb && ch.embedding) detail::unmap(*ch.demb, TensorMap{{"embedding"}, {cfg_.hidden}, cfg_.vocab, {}}, out);
    if (ch.final_grads) detail::unmap_norm(*ch.final_grads, "final_norm", cfg_.hidden, out);
  }
  return out;
}

}  // namespace shardalg::nn
