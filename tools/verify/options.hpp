// tools/verify/options.hpp — shardalg-verify's configuration: the flags' values, what they imply
// (block config, tolerance, dropout seed), and the checks made before any rank starts.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "shardalg/nn/block.hpp"
#include "shardalg/nn/embedding.hpp"
#include "shardalg/nn/nn.hpp"
#include "shardalg/nn/sp_block.hpp"
#include "shardalg/verify/check.hpp"
#include "shardalg/version.hpp"

namespace sv {

using shardalg::Index;
namespace nn = shardalg::nn;

struct Options {
  int tp = 2;
  bool sp = false;
  int layers = 2;
  Index hidden = 64, heads = 8, groups = 0, ffn = 0, seq = 32, batch = 2, vocab = 1000, vocab_divisor = 128;
  std::string dtype = "double";
  std::uint64_t seed = 1234;
  std::string backend = "thread";
  double dropout = 0.1;
  std::string act = "gelu";
  std::string norm = "layernorm";
  bool no_bias = false;
  bool json = false, explain = false, verbose = false;
  std::string trace;
  std::string progress = "auto";

  [[nodiscard]] Index tokens() const { return batch * seq; }
  [[nodiscard]] Index ffn_size() const { return ffn == 0 ? 4 * hidden : ffn; }
  [[nodiscard]] Index num_groups() const { return groups == 0 ? heads : groups; }
  [[nodiscard]] nn::Activation activation() const {
    return act == "swiglu" ? nn::Activation::swiglu : act == "gelu-erf" ? nn::Activation::gelu_erf : nn::Activation::gelu_tanh;
  }
  [[nodiscard]] nn::NormKind norm_kind() const { return norm == "rmsnorm" ? nn::NormKind::rms : nn::NormKind::layer; }
  [[nodiscard]] bool is_double() const { return dtype == "double"; }
  [[nodiscard]] double tolerance() const {
    return is_double() ? shardalg::verify::tolerance_for<double>() : shardalg::verify::tolerance_for<float>();
  }
};

/// A configuration error: printed as one line, exit status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The norms' ε, exactly representable in float and double.
constexpr double kEps = 1.0 / 131072;

inline const std::string kVersion = std::to_string(SHARDALG_VERSION_MAJOR) + "." + std::to_string(SHARDALG_VERSION_MINOR) +
                                    "." + std::to_string(SHARDALG_VERSION_PATCH);

/// The dropout seed of the first step, as nn::Gpt::dropout_seed() computes it (the Gpt row checks
/// that they agree), so that the layer-by-layer run, nn::Gpt and the dense reference share masks.
inline std::uint64_t drop_seed(const Options& o) { return o.seed ^ 0x9E3779B97F4A7C15ULL; }

inline nn::BlockConfig block_config(const Options& o, int layer) {
  nn::BlockConfig c;
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.groups = o.num_groups();
  c.seq = o.seq;
  c.ffn = o.ffn_size();
  c.act = o.activation();
  c.norm = o.norm_kind();
  c.bias = !o.no_bias;
  c.eps = kEps;
  c.dropout = o.dropout;
  c.dropout_seed = drop_seed(o);
  c.layer = static_cast<std::uint32_t>(layer);
  return c;
}

/// Everything that can be checked before any rank starts; throws with one line naming the values.
inline void validate(const Options& o, int p) {
  using shardalg::detail::cat;
  auto positive = [](const char* what, Index v) {
    if (v < 1) throw ConfigError(cat(what, " ", v, " must be at least 1"));
  };
  positive("--tp", p);
  positive("--layers", o.layers);
  positive("--hidden", o.hidden);
  positive("--heads", o.heads);
  positive("--seq", o.seq);
  positive("--batch", o.batch);
  positive("--vocab", o.vocab);
  positive("--vocab-divisor", o.vocab_divisor);
  if (o.groups < 0) throw ConfigError(cat("--groups ", o.groups, " must be 0 (= heads) or positive"));
  if (o.ffn < 0) throw ConfigError(cat("--ffn ", o.ffn, " must be 0 (= 4·hidden) or positive"));
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) throw ConfigError(cat("--dropout ", o.dropout, " is outside [0, 1)"));
  // The layers' own checks, with their own messages (e.g. "Attention: 32 heads are not divisible by
  // tensor-parallel size 6").
  nn::TransformerBlock<double>::check(block_config(o, 0), p);
  const Index padded = nn::padded_vocab(o.vocab, o.vocab_divisor, p);
  nn::VocabParallelEmbedding<double>::check_padding("VocabParallelEmbedding", o.vocab, padded, p);
  if (o.sp) nn::SequenceParallelBlock<double>::check_tokens(o.tokens(), p);
}

}  // namespace sv
