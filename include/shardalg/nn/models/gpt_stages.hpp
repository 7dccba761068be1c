// shardalg/nn/models/gpt_stages.hpp — the GPT's wiring, written once: the pieces nn::Gpt runs in
// a row and nn::PipelineGpt runs stage by stage, each under the ledger scope both use.
//
//   embed           ids → E[Row] lookup → Partial → all_reduce → X[R]   (SP: reduce_scatter → X[Row])
//   blocks_forward  X → block 0 → … → block n−1, each under "layer<k>", caches kept
//   head            logits[C] = X[R] · Eᵀ[C]                            (SP: all_gather X first)
//   loss            the vocabulary-parallel cross-entropy of the logits
//   head_backward   dlogits → dX (the adjoint of the head's collectives) and dE = dlogitsᵀ·X
//   embed_backward  dX → the lookup's scatter-add into dE
//
// The final norm and the embedding dropout sit between them with no scope of their own.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "shardalg/comm/communicator.hpp"

namespace shardalg::nn::stages {

template <bool SP, class Emb>
auto embed(const Emb& emb, const Group& g, std::span<const std::int64_t> tokens) {
  auto s = scope(g, "embedding");
  if constexpr (SP) return emb.forward_sp(tokens);
  else return emb.forward(tokens);
}

/// Block k of `blocks` on x, under the scope "layer<id(k)>"; `each(k, block)` runs first (the
/// pipeline's dropout row base), `after(k, y)` on each output (nn::Gpt's finite check).
template <class Blocks, class X, class Caches, class Id, class Each, class After>
X blocks_forward(Blocks& blocks, X x, Caches& caches, const Group& g, Id&& id, Each&& each, After&& after) {
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    auto s = scope(g, "layer" + std::to_string(id(k)));
    each(k, blocks[k]);
    auto f = blocks[k].forward(x);
    after(k, f.y);
    x = std::move(f.y);
    caches.push_back(std::move(f.cache));
  }
  return x;
}

template <bool SP, class Emb, class Y>
auto head(const Emb& emb, const Group& g, const Y& y) {
  auto s = scope(g, "head");
  if constexpr (SP) return emb.logits_sp(y);
  else return emb.logits(y);
}

template <class Loss, class Logits>
auto loss(const Loss& l, const Group& g, const Logits& logits, std::span<const std::int64_t> targets) {
  auto s = scope(g, "loss");
  return l.forward(logits, targets);
}

template <bool SP, class Emb, class Cache, class Dz>
auto head_backward(const Emb& emb, const Group& g, const Cache& c, const Dz& dz) {
  auto s = scope(g, "head");
  if constexpr (SP) return emb.logits_backward_sp(c, dz);
  else return emb.logits_backward(c, dz);
}

template <bool SP, class Emb, class Cache, class X>
auto embed_backward(const Emb& emb, const Group& g, const Cache& c, const X& dx) {
  auto s = scope(g, "embedding");
  if constexpr (SP) return emb.backward_sp(c, dx);  // all_gather T·h
  else return emb.backward(c, dx);
}

}  // namespace shardalg::nn::stages
