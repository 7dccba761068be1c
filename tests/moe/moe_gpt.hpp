// tests/moe/moe_gpt.hpp — a small GPT whose MLPs are mixtures of experts, composed from the library's
// pieces (vocab-parallel embedding and tied head, LayerNorm, attention, nn::Moe, the fused
// cross-entropy) on a world of EP·ETP ranks: the dense layers are tensor-parallel over the whole
// world (TP = EP·ETP), the MoE layers use the mesh ep × etp of the same world.
//
//   X[R] → LN1 → Attention → + X → Y1[R] → LN2 → split_tokens → M[ep:Row, etp:R] → Moe →
//        → gather_tokens (all_gather<ep>) → + Y1 → … → final LN → logits[C] → loss + Σ aux
//
// Backward: the adjoints in reverse (gather's adjoint: split, free; split's adjoint: all_gather<ep>).
// One SGD step per batch; the loss (cross-entropy + the layers' aux losses) of every step.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "shardalg/nn/layers/attention.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "shardalg/nn/layers/moe.hpp"
#include "shardalg/nn/layers/norm.hpp"
#include "shardalg/shardalg.hpp"

namespace moe_gpt {

using namespace shardalg;
using Ids = std::vector<std::int64_t>;

inline constexpr Index kVocab = 64, kHidden = 16, kHeads = 4, kSeq = 8, kBatch = 2, kLayers = 2;
inline constexpr std::uint64_t kSeed = 4242;

inline nn::MoeConfig moe_config(std::uint32_t layer) {
  nn::MoeConfig c;
  c.hidden = kHidden;
  c.experts = 4;
  c.top_k = 2;
  c.ffn = 16;
  c.act = layer % 2 == 0 ? nn::Activation::swiglu : nn::Activation::gelu_tanh;
  c.aux_loss_coeff = 0.01;
  c.layer = layer;
  return c;
}

template <class T>
class MoeGpt {
 public:
  using Emb = nn::VocabParallelEmbedding<T>;
  using Norm = nn::LayerNorm<T>;
  using Attn = nn::Attention<T>;
  using MoeT = nn::Moe<T>;
  using X = Sharded<T, Replicated>;

  MoeGpt(const Group& world, const Mesh& mesh)
      : world_(world), mesh_(mesh), emb_(Emb::init(kVocab, kHidden, world, nn::NormalInit{kSeed, 0.1},
                                                   nn::tensor_id(0, nn::word_embedding_kind), 16)),
        lnf_(Norm::init(kHidden, nn::NormKind::layer, world)), loss_(kVocab) {
    for (Index l = 0; l < kLayers; ++l) {
      const nn::InitConfig ic{kSeed, 0.1, static_cast<int>(kLayers), static_cast<std::uint32_t>(l)};
      layers_.push_back({Norm::init(kHidden, nn::NormKind::layer, world),
                         Attn::init({kHidden, kHeads, 0, kSeq, true}, world, ic),
                         Norm::init(kHidden, nn::NormKind::layer, world),
                         MoeT::init(moe_config(static_cast<std::uint32_t>(l)), mesh, ic)});
    }
  }

  /// Forward, backward, one SGD step; returns the loss before the step.
  double step(const Ids& ids, const Ids& targets, T lr) {
    struct Caches {
      typename Norm::template Forward<Replicated> l1;
      typename Attn::Forward a;
      typename Norm::template Forward<Replicated> l2;
      typename MoeT::Forward m;
    };
    auto ef = emb_.forward(ids);
    X x = ef.y;
    std::vector<std::optional<Caches>> cs(layers_.size());
    T aux = 0;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      auto& L = layers_[l];
      auto l1 = L.ln1.forward(x);
      auto a = L.attn.forward(l1.y);
      X y1 = x + a.z;
      auto l2 = L.ln2.forward(y1);
      auto m = L.moe.forward(MoeT::split_tokens(l2.y, mesh_));  // X[R] → X[ep:Row, etp:R]
      x = y1 + MoeT::gather_tokens(m.y, world_);                 // all_gather<ep> → R
      aux += m.aux;
      cs[l].emplace(Caches{std::move(l1), std::move(a), std::move(l2), std::move(m)});
    }
    auto fn = lnf_.forward(x);
    auto head = emb_.logits(fn.y);
    auto lf = loss_.forward(head.logits, targets);
    const double total = static_cast<double>(lf.mean + aux);
    // backward
    auto hg = emb_.logits_backward(head.cache, loss_.backward_mean(lf.cache));
    auto fg = lnf_.backward(fn.cache, hg.dx);
    X dx = fg.dx;
    struct G {
      typename Norm::template ParamGrads<Replicated> ln1, ln2;
      typename Attn::ParamGrads attn;
      typename MoeT::ReducedGrads moe;
    };
    std::vector<std::optional<G>> gs(layers_.size());
    for (std::size_t l = layers_.size(); l-- > 0;) {
      auto& L = layers_[l];
      auto& c = *cs[l];
      auto mg = L.moe.backward(c.m.cache, MoeT::split_tokens(dx, mesh_), T(1));  // gather's adjoint: split
      auto gl2 = L.ln2.backward(c.l2.cache, MoeT::gather_tokens(mg.dx, world_));  // split's adjoint: all_gather<ep>
      X dy1 = dx + gl2.dx;
      auto ga = L.attn.backward(c.a.cache, dy1);
      auto gl1 = L.ln1.backward(c.l1.cache, ga.dx);
      dx = dy1 + gl1.dx;
      gs[l].emplace(G{std::move(gl1.params), std::move(gl2.params), std::move(ga.params), L.moe.reduce_grads(std::move(mg.params))});
    }
    auto eg = emb_.backward(ef.cache, dx);
    // SGD
    emb_.sgd({hg.params.de + eg.de}, lr);
    lnf_.sgd(fg.params, lr);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      auto& L = layers_[l];
      L.ln1.sgd(gs[l]->ln1, lr);
      L.ln2.sgd(gs[l]->ln2, lr);
      L.attn.sgd(gs[l]->attn, lr);
      L.moe.sgd(gs[l]->moe, lr);
    }
    return total;
  }

 private:
  struct Layer {
    Norm ln1;
    Attn attn;
    Norm ln2;
    MoeT moe;
  };
  Group world_;
  Mesh mesh_;
  Emb emb_;
  std::vector<Layer> layers_;
  Norm lnf_;
  nn::VocabParallelCrossEntropy<T> loss_;
};

/// Batch s: kBatch sequences of kSeq byte-like tokens and their successors.
inline std::pair<Ids, Ids> batch(long s) {
  Ids x, y;
  for (Index b = 0; b < kBatch; ++b)
    for (Index t = 0; t < kSeq; ++t) {
      const long v = (s * 13 + b * 29 + t * 7 + (t * t) % 5) % kVocab;
      x.push_back(v);
      y.push_back((v * 3 + 1) % kVocab);
    }
  return {x, y};
}

/// The loss of `steps` SGD steps on a world of ep·etp thread ranks (rank 0's; every rank has it).
inline std::vector<double> curve(int ep_size, int etp_size, int steps) {
  std::vector<double> out;
  std::mutex mu;
  run_ranks(ep_size * etp_size, [&](ThreadComm& comm) {
    const Group world(comm);
    Mesh mesh(world, {{"ep", ep_size}, {"etp", etp_size}});
    MoeGpt<double> model(world, mesh);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const auto b = batch(s % 2);  // two batches in turn: the loss must fall
      losses.push_back(model.step(b.first, b.second, 0.5));
    }
    if (comm.rank() == 0) {
      std::lock_guard lk(mu);
      out = losses;
    }
  });
  return out;
}

}  // namespace moe_gpt
