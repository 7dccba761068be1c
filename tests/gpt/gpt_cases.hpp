// tests/gpt/gpt_cases.hpp — shared by test_gpt.cpp (thread worlds) and test_gpt_mpi.cpp: a tiny
// byte-level GPT, deterministic batches from a fixed text, and a training run that records the
// loss of every step.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "shardalg/nn/gpt.hpp"
#include "shardalg/shardalg.hpp"

namespace gt {

using namespace shardalg;
using Ids = std::vector<std::int64_t>;

/// A fixed, self-written text (byte-level tokens).
inline constexpr std::string_view kText =
    "The sharded matrix keeps its layout in its type. A replicated tensor lives whole on every rank; "
    "a row-sharded one keeps a block of tokens; a column-sharded one keeps a block of features; a "
    "partial one keeps a summand that is not yet a value. Multiply a replicated input by a column-"
    "sharded weight and the output is column-sharded, with no message sent. Multiply that by a "
    "row-sharded weight and the output is partial: one all-reduce turns it into a value again. "
    "Under sequence parallelism the tokens stay split between the blocks, an all-gather enters each "
    "column-parallel region and a reduce-scatter leaves each row-parallel one. ";

/// The tiny model of the loss-curve tests: 2 layers, h = 32, 4 heads, 64 tokens per step.
inline nn::GptConfig tiny(bool sp) {
  nn::GptConfig c;
  c.vocab = 256;
  c.hidden = 32;
  c.heads = 4;
  c.layers = 2;
  c.seq = 16;
  c.batch = 4;
  c.dropout = 0.1;
  c.sp = sp;
  c.seed = 2024;
  c.vocab_divisor = 64;
  return c;
}

/// Batch s: `batch` windows of seq + 1 bytes at deterministic offsets; inputs and next-byte targets.
inline std::pair<Ids, Ids> batch_at(const nn::GptConfig& c, std::string_view text, long s) {
  Ids x, y;
  const auto span = static_cast<long>(text.size()) - c.seq - 1;
  for (Index b = 0; b < c.batch; ++b) {
    const long off = ((s * c.batch + b) * 37) % span;
    for (Index t = 0; t < c.seq; ++t) {
      x.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(off + t)]));
      y.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(off + t + 1)]));
    }
  }
  return {x, y};
}

inline nn::Adam<double>::Options adam_options() { return {3e-3, 0.9, 0.95, 1e-8, 0.01}; }

/// `steps` steps of Adam with clipping at 1.0 on `g`; the loss of every step (before its update).
template <class T>
std::vector<double> train(const nn::GptConfig& c, const Group& g, int steps, std::string_view text = kText) {
  auto model = nn::Gpt<T>::init(c, g);
  const auto o = adam_options();
  nn::Adam<T> opt({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = batch_at(c, text, s);
    losses.push_back(static_cast<double>(model.forward_backward(x, y)));
    model.step(opt, 1.0);
  }
  return losses;
}

/// Largest relative difference per step between two curves.
inline double curve_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return w;
}

}  // namespace gt
