// tools/verify/options.hpp — shardalg-verify's configuration: the flags' values, what they imply
// (block config, tolerance, dropout seed), and the checks made before any rank starts.
#pragma once

#include <cmath>
#include <filesystem>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "shardalg/nn/train/measured_memory.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/verify/check.hpp"
#include "shardalg/version.hpp"
#include "trace.hpp"

namespace sv {

using shardalg::Index;
namespace nn = shardalg::nn;

struct Options {
  int tp = 2;
  int dp = 1;                          // data-parallel replicas: a dp × tp mesh (tools/verify/data_parallel.hpp)
  int zero = 0;                        // --zero [1|2|3]: the sharded optimizer (ZeRO-1) on dp; 2: gradients too; 3: parameters too
  std::size_t bucket = std::size_t{1} << 16;  // --bucket: values per data-parallel gradient bucket (0: one per tensor)
  int pp = 1;                          // pipeline stages' ranks: a dp × pp × tp mesh (tools/verify/pipeline.hpp)
  std::string schedule = "1f1b";       // --schedule: afab, 1f1b, interleaved (2 chunks per rank), zb-h1
  int microbatches = 0;                // --microbatches per replica (0: one sequence each)
  bool dealloc = false;                // --dealloc: release a stage's output once sent
  bool overlap = false;                // --overlap-p2p: post the next receive before computing
  bool sp = false;
  int cp = 1;                          // --cp: context-parallel ranks, a dp × cp × tp mesh (tools/verify/data_parallel.hpp)
  std::string cp_algo = "ring";        // --cp-algo: ring or a2a
  std::string recompute = "none";      // --recompute: none, selective or full (nn/layers/block.hpp)
  int layers = 2;
  Index hidden = 64, heads = 8, groups = 0, ffn = 0, seq = 32, batch = 2, vocab = 1000, vocab_divisor = 128;
  std::string dtype = "double";        // float, double; bf16 and fp16 run the bounds check (precision.cpp)
  bool bounds = false;                 // --bounds: the bounds check for --dtype float or double
  std::uint64_t seed = 1234;
  std::int64_t seed_arg = 1234;  // --seed as given (signed, so that a negative one is refused, not wrapped)
  std::string backend = "thread";
  double dropout = 0.1;
  double attn_dropout = 0.0;           // --attn-dropout: dropout on the attention probabilities
  std::string act = "gelu";
  std::string norm = "layernorm";
  bool no_bias = false;
  bool json = false, explain = false, verbose = false;
  std::string trace;
  std::string dump;                    // --dump DIR: safetensors of every rank, the dense twin and map.json (dump.hpp)
  std::string progress = "auto";

  [[nodiscard]] Index tokens() const { return batch * seq; }
  [[nodiscard]] Index ffn_size() const { return ffn == 0 ? 4 * hidden : ffn; }
  [[nodiscard]] Index num_groups() const { return groups == 0 ? heads : groups; }
  [[nodiscard]] nn::Activation activation() const {
    return act == "swiglu" ? nn::Activation::swiglu : act == "gelu-erf" ? nn::Activation::gelu_erf : nn::Activation::gelu_tanh;
  }
  [[nodiscard]] nn::Recompute recompute_kind() const {
    return recompute == "full" ? nn::Recompute::full : recompute == "selective" ? nn::Recompute::selective : nn::Recompute::none;
  }
  [[nodiscard]] nn::NormKind norm_kind() const { return norm == "rmsnorm" ? nn::NormKind::rms : nn::NormKind::layer; }
  [[nodiscard]] bool is_double() const { return dtype == "double"; }
  /// Each block against its derived rounding bound (tools/verify/precision.cpp), not the whole run
  /// against a fixed tolerance.
  [[nodiscard]] bool bounds_mode() const { return bounds || dtype == "bf16" || dtype == "fp16"; }
  /// v as the program's element type holds it: the masters are its constants.
  [[nodiscard]] double round_to_dtype(double v) const {
    if (dtype == "bf16") return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(v))));
    if (dtype == "fp16") return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(v))));
    return is_double() ? v : static_cast<double>(static_cast<float>(v));
  }
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
  c.recompute = o.recompute_kind();
  c.bias = !o.no_bias;
  c.eps = kEps;
  c.dropout = o.dropout;
  c.attn_dropout = o.attn_dropout;
  c.dropout_seed = drop_seed(o);
  c.layer = static_cast<std::uint32_t>(layer);
  return c;
}

/// The nn::Gpt configuration of these options.
inline nn::GptConfig gpt_config(const Options& o, bool sp) {
  nn::GptConfig gc;
  gc.vocab = o.vocab, gc.hidden = o.hidden, gc.heads = o.heads, gc.groups = o.groups, gc.ffn = o.ffn;
  gc.layers = o.layers, gc.seq = o.seq, gc.batch = o.batch, gc.activation = o.activation(), gc.norm = o.norm_kind();
  gc.bias = !o.no_bias, gc.eps = kEps, gc.dropout = o.dropout, gc.sp = sp, gc.seed = o.seed;
  gc.attn_dropout = o.attn_dropout;
  gc.recompute = o.recompute_kind();
  gc.vocab_divisor = o.vocab_divisor;
  return gc;
}

/// A configuration whose memory would exceed this machine is refused up front, with the estimate:
/// per rank, the weights and gradients of the layer-by-layer run and of nn::Gpt (4 copies of the
/// rank's parameters) and both runs' activations (nn::expected_activations), plus the dense
/// reference in double (3 copies of every parameter, the TP-1 activations). Threads hold every
/// rank in this process; under mpirun one process holds one rank and (at most) the reference.
inline void check_memory(const Options& o, int p, int replicas = 1) {
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  const double page = static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (pages <= 0 || page <= 0) return;  // unknown: nothing to compare with
  const double machine = pages * page;
  const double e = o.is_double() ? 8 : 4, h = static_cast<double>(o.hidden), L = static_cast<double>(o.layers);
  const double f = static_cast<double>(o.ffn_size()) * (o.act == "swiglu" ? 3 : 2);
  const nn::GptConfig gc = gpt_config(o, o.sp);
  const double vp = static_cast<double>(nn::padded_vocab(o.vocab, o.vocab_divisor, p));
  const double params_rank = (vp * h + L * (4 * h * h + h * f)) / p + L * 8 * h + 2 * h;
  const double per_rank = 4 * params_rank * e + 2 * nn::expected_activations(gc, p, static_cast<std::size_t>(e)).total();
  const double params_dense = vp * h + L * (4 * h * h + h * f + 8 * h) + 2 * h;
  auto dense_cfg = gc;
  dense_cfg.sp = false;
  const double dense = 3 * params_dense * 8 + nn::expected_activations(dense_cfg, 1, 8).total();
  const bool threads = o.backend != "mpi";
  const double need = (threads ? p * replicas : 1) * per_rank * (replicas > 1 ? 2 : 1) + dense;
  if (need > 0.8 * machine) {
    auto gib = [](double b) { return shardalg::detail::cat(std::round(b / (1 << 30) * 10) / 10, " GiB"); };
    auto mib = [&](double b) {
      return b >= (1 << 30) ? gib(b) : shardalg::detail::cat(std::round(b / (1 << 20) * 10) / 10, " MiB");
    };
    throw ConfigError(shardalg::detail::cat("this run needs about ", gib(need), " of memory (estimate: ",
                                            threads ? std::to_string(p * replicas) + " ranks × " : std::string("one rank, "),
                                            mib(per_rank), threads ? " each" : "", ", plus ", gib(dense),
                                            " for the dense reference), more than 80% of this machine's ", gib(machine)));
  }
}

/// Everything that can be checked before any rank starts; throws with one line naming the values.
inline void validate(const Options& o, int p) {
  using shardalg::detail::cat;
  auto positive = [](const char* what, Index v) {
    if (v < 1) throw ConfigError(cat(what, " ", v, " must be at least 1"));
  };
  positive("--tp", p);
  positive("--dp", o.dp);
  if (o.bounds_mode()) {
    std::string with;
    if (o.backend != "thread") with = "--backend " + o.backend;
    else if (o.dp > 1) with = cat("--dp ", o.dp);
    else if (o.pp > 1) with = cat("--pp ", o.pp);
    else if (o.cp > 1) with = cat("--cp ", o.cp);
    else if (o.explain) with = "--explain";
    else if (!o.trace.empty()) with = "--trace";
    else if (!o.dump.empty()) with = "--dump";
    if (!with.empty())
      throw ConfigError(cat(o.bounds ? std::string("--bounds") : "--dtype " + o.dtype,
                            " checks each block against its rounding bound, tensor-parallel on threads: not with ", with));
  }
  // Replicas take balanced blocks of the sequences (7 on 3: 3, 2, 2); with --pp or --cp the
  // per-replica micro-batches and chunks are counted from batch/dp, so there it must divide.
  if (o.batch < o.dp)
    throw ConfigError(cat("--batch ", o.batch, " is smaller than --dp ", o.dp, " (every replica needs a sequence)"));
  if ((o.pp > 1 || o.cp > 1) && o.batch % o.dp != 0)
    throw ConfigError(cat("--batch ", o.batch, " is not divisible by --dp ", o.dp,
                          " (with --pp or --cp each replica takes batch/dp sequences)"));
  if (o.zero && o.dp < 2) throw ConfigError("--zero shards the optimizer over data-parallel replicas: it needs --dp 2 or more");
  positive("--pp", o.pp);
  positive("--cp", o.cp);
  if (o.cp > 1 && o.dump.size()) throw ConfigError(cat("--dump writes a tensor-parallel run (and --sp); not one with --cp ", o.cp));
  if (o.cp > 1 && o.seq % (2 * o.cp) != 0)
    throw ConfigError(cat("--seq ", o.seq, " is not divisible by 2 × --cp = ", 2 * o.cp, " (each cp rank holds two chunks of every sequence)"));
  // The world is dp·pp·tp ranks (threads in this process, or processes under mpirun): an int.
  constexpr std::int64_t kMaxRanks = std::numeric_limits<int>::max();
  const std::int64_t dp_tp = std::int64_t{o.dp} * o.cp * p;  // < 2^62; then · pp < 2^62 once dp·tp ≤ 2^31 − 1
  if (dp_tp > kMaxRanks || dp_tp * o.pp > kMaxRanks)
    throw ConfigError(cat("--dp ", o.dp, " × --pp ", o.pp, " × --tp ", p, " is more than ", kMaxRanks, " ranks"));
  if (o.microbatches < 0) throw ConfigError(cat("--microbatches ", o.microbatches, " must not be negative"));
  if (o.pp > 1 && o.microbatches == 0)  // parse_options() sets batch/dp, unless that is past an int
    throw ConfigError(cat("--pp ", o.pp, ": the ", o.batch / o.dp, " sequences of a replica (--batch / --dp) are more than ",
                          std::numeric_limits<int>::max(), " micro-batches; pass --microbatches"));
  if (o.pp > 1 || o.microbatches > 0) {
    const Index m = o.microbatches > 0 ? o.microbatches : o.batch / o.dp;
    if (o.zero) throw ConfigError("--zero is not combined with --pp (the pipeline run computes gradients only)");
    if ((o.batch / o.dp) % m != 0)
      throw ConfigError(cat("--microbatches ", m, " does not divide the ", o.batch / o.dp,
                            " sequences of a replica (--batch / --dp)"));
    if (o.schedule == "interleaved" && m % o.pp != 0)
      throw ConfigError(cat("--schedule interleaved: --microbatches ", m, " is not a multiple of --pp ", o.pp));
  }
  if (o.seed_arg < 0) throw ConfigError(cat("--seed ", o.seed_arg, " must not be negative"));
  positive("--layers", o.layers);
  positive("--hidden", o.hidden);
  positive("--heads", o.heads);
  positive("--seq", o.seq);
  positive("--batch", o.batch);
  positive("--vocab", o.vocab);
  if (o.vocab_divisor < 0)
    throw ConfigError(cat("--vocab-divisor ", o.vocab_divisor, " must be 0 (no padding) or positive"));
  if (o.groups < 0) throw ConfigError(cat("--groups ", o.groups, " must be 0 (= heads) or positive"));
  if (o.ffn < 0) throw ConfigError(cat("--ffn ", o.ffn, " must be 0 (= 4·hidden) or positive"));
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) throw ConfigError(cat("--dropout ", o.dropout, " is outside [0, 1)"));
  if (!(o.attn_dropout >= 0.0 && o.attn_dropout < 1.0))
    throw ConfigError(cat("--attn-dropout ", o.attn_dropout, " is outside [0, 1)"));
  // The layers' own checks, with their own messages (e.g. "Attention: 32 heads are not divisible by
  // tensor-parallel size 6").
  nn::TransformerBlock<double>::check(block_config(o, 0), p);
  nn::Gpt<double>::check(gpt_config(o, o.sp), p);  // sizes whose products overflow 64 bits, …
  const Index padded = nn::padded_vocab(o.vocab, o.vocab_divisor, p);
  nn::VocabParallelEmbedding<double>::check_padding("VocabParallelEmbedding", o.vocab, padded, p);
  check_trace_writable(o.trace);
  if (!o.dump.empty()) {
    if (o.dp > 1 || o.pp > 1) throw ConfigError(cat("--dump writes a tensor-parallel run (and --sp); not one with --dp ", o.dp, " or --pp ", o.pp));
    std::error_code ec;
    if (!std::filesystem::is_directory(o.dump, ec)) throw ConfigError(cat("--dump ", o.dump, ": not a directory"));
  }
  check_memory(o, p, o.dp * o.pp * o.cp);
}

}  // namespace sv
