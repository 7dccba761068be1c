// tools/verify/cli.cpp — the flags, their defaults and their ranges (CLI11 prints --help; every
// error, CLI11's or a range's, is one line "shardalg-verify: error: …" and exit status 2).
#include "cli.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <charconv>
#include <deque>
#include <functional>
#include <limits>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace sv {

namespace {

using shardalg::detail::cat;

/// A numeric flag: CLI11 keeps its text, converted once the line is parsed. (CLI11 2.1 would wrap
/// --bucket -1 into 2^64 − 1 and clamp --seed 10^20 to 2^63 − 1; here each is an error naming the
/// flag and its text, as is a value outside the flag's range.)
struct NumericFlag {
  std::string flag, text;
  std::function<void()> convert;  // throws ConfigError
};

/// "--X v must be at least lo" ("must not be negative" for lo = 0), or "must be at most hi".
template <class I>
[[noreturn]] void out_of_range(const std::string& flag, const std::string& text, bool below, I lo, I hi) {
  if (below)
    throw ConfigError(lo == 0 ? cat(flag, " ", text, " must not be negative") : cat(flag, " ", text, " must be at least ", lo));
  throw ConfigError(cat(flag, " ", text, " must be at most ", hi));
}

/// The whole text as a decimal integer (an optional sign, then digits) in [lo, hi].
template <class I>
I to_integer(const std::string& flag, const std::string& text, I lo, I hi) {
  const char* const end = text.data() + text.size();
  const bool minus = !text.empty() && text[0] == '-', plus = !text.empty() && text[0] == '+';
  const char* const digits = text.data() + (minus || plus ? 1 : 0);
  if (digits == end || !std::all_of(digits, end, [](char c) { return c >= '0' && c <= '9'; }))
    throw ConfigError(cat(flag, " ", text, " is not an integer"));
  if constexpr (std::is_unsigned_v<I>) {
    if (minus) {  // "-0" is 0; any other negative value is below the range
      if (lo == 0 && std::all_of(digits, end, [](char c) { return c == '0'; })) return 0;
      out_of_range(flag, text, true, lo, hi);
    }
  }
  I v{};
  const auto [ptr, ec] = std::from_chars(minus ? text.data() : digits, end, v);
  if (ec == std::errc::result_out_of_range) out_of_range(flag, text, minus, lo, hi);
  if (ec != std::errc{} || ptr != end) throw ConfigError(cat(flag, " ", text, " is not an integer"));
  if (v < lo || v > hi) out_of_range(flag, text, v < lo, lo, hi);
  return v;
}

/// The whole text as a number (strtod's forms: 0.1, 1e-3, 0x1p-3) in [0, 1).
double to_probability(const std::string& flag, const std::string& text) {
  const char* const begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size()) throw ConfigError(cat(flag, " ", text, " is not a number"));
  // 1e999 is ∞ and NaN is neither: both outside. An underflow (1e-400) is strtod's 0 or subnormal.
  if (!(v >= 0.0 && v < 1.0)) throw ConfigError(cat(flag, " ", text, " is outside [0, 1)"));
  return v;
}

/// --flag for an integer `field` (its default shown), converted into [lo, hi] after parsing.
template <class I>
CLI::Option* integer_option(CLI::App& app, std::deque<NumericFlag>& flags, const std::string& flag, I& field,
                            const std::string& help, I lo, I hi = std::numeric_limits<I>::max()) {
  NumericFlag& f = flags.emplace_back();  // a deque: f stays where it is as more are added
  f.flag = flag;
  f.text = std::to_string(field);
  f.convert = [&f, &field, lo, hi] { field = to_integer<I>(f.flag, f.text, lo, hi); };
  return app.add_option(flag, f.text, help)->type_name(std::is_unsigned_v<I> ? "UINT" : "INT")->capture_default_str();
}

/// --flag for a probability `field` in [0, 1).
CLI::Option* probability_option(CLI::App& app, std::deque<NumericFlag>& flags, const std::string& flag, double& field,
                                const std::string& help) {
  NumericFlag& f = flags.emplace_back();
  f.flag = flag;
  f.text = fmt::format("{}", field);
  f.convert = [&f, &field] { field = to_probability(f.flag, f.text); };
  return app.add_option(flag, f.text, help)->type_name("FLOAT")->capture_default_str();
}

}  // namespace

Parsed parse_options(int argc, char** argv) {
  Parsed parsed;
  Options& o = parsed.options;
  CLI::App app{"shardalg-verify: one forward + backward pass of a small GPT, tensor-parallel vs dense reference"};
  // Each numeric flag's own range is checked here ("--tp 0 must be at least 1", "--bucket -1 must
  // not be negative", "--layers 99999999999 must be at most 2147483647"); validate() checks the
  // flags together (divisibility, products that overflow, memory).
  std::deque<NumericFlag> flags;
  constexpr Index kOne = 1, kZero = 0;
  integer_option(app, flags, "--tp", o.tp, "tensor-parallel size (threads); under mpirun the process count", 1);
  integer_option(app, flags, "--dp", o.dp,
                 "data-parallel replicas: a dp × tp mesh (threads: dp·tp ranks; mpirun: the process count is dp·tp)", 1);
  integer_option(app, flags, "--cp", o.cp, "context-parallel ranks: a dp × cp × tp mesh (with --pp: dp × pp × cp × tp), the sequence split over cp", 1);
  app.add_option("--cp-algo", o.cp_algo, "attention over cp: ring (K/V around a ring) or a2a (all-to-all, heads for sequence)")
      ->check(CLI::IsMember({"ring", "a2a"}))
      ->capture_default_str();
  app.add_option("--recompute", o.recompute,
                 "activation recomputation: none, selective (the attention's probabilities again in the backward) or full "
                 "(each block keeps its input; the backward runs its forward again)")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  app.add_option("--zero", o.zero,
                 "with --dp, the ZeRO stage: --zero alone is 1, the sharded optimizer (reduce_scatter + all_gather over dp); "
                 "--zero 2 also reduce-scatters the gradients during the backward; --zero 3 also keeps only the parameters' "
                 "slices between steps (all_gather over dp in the forward) (not given: 0)")
      ->expected(0, 1)
      ->default_str("1")
      ->check(CLI::Range(0, 3));
  integer_option(app, flags, "--bucket", o.bucket, "with --dp: values per gradient bucket (0: one bucket per tensor)",
                 std::size_t{0});
  integer_option(app, flags, "--pp", o.pp,
                 "pipeline ranks: a dp × pp × tp mesh, nn::PipelineGpt under a schedule (threads: dp·pp·tp ranks)", 1);
  app.add_option("--schedule", o.schedule, "with --pp: the pipeline schedule")
      ->check(CLI::IsMember({"afab", "1f1b", "interleaved", "zb-h1"}, CLI::ignore_case))
      ->transform(CLI::IsMember({"afab", "1f1b", "interleaved", "zb-h1"}, CLI::ignore_case))
      ->capture_default_str();
  integer_option(app, flags, "--microbatches", o.microbatches,
                 "with --pp: micro-batches per replica (0: one sequence each, --batch / --dp)", 0);
  app.add_flag("--dealloc", o.dealloc, "with --pp: release each stage output once sent (output deallocation)");
  app.add_flag("--overlap-p2p", o.overlap, "with --pp: post the next receive before computing (warm-up/flush overlap)");
  app.add_flag("--sp", o.sp, "sequence parallelism (RowSharded activations between blocks)");
  integer_option(app, flags, "--layers", o.layers, "transformer blocks", 1);
  integer_option(app, flags, "--hidden", o.hidden, "hidden size h", kOne);
  integer_option(app, flags, "--heads", o.heads, "attention heads", kOne);
  integer_option(app, flags, "--groups", o.groups, "query groups for GQA (0: = heads, MHA)", kZero);
  integer_option(app, flags, "--ffn", o.ffn, "MLP hidden size (0: 4·hidden)", kZero);
  integer_option(app, flags, "--seq", o.seq, "sequence length s", kOne);
  integer_option(app, flags, "--batch", o.batch, "sequences per batch b", kOne);
  integer_option(app, flags, "--vocab", o.vocab, "vocabulary size (padded to a multiple of divisor·TP)", kOne);
  integer_option(app, flags, "--vocab-divisor", o.vocab_divisor,
                 "Megatron's make-vocab-size-divisible-by; 0: no padding (the vocabulary in balanced blocks)", kZero);
  app.add_option("--dtype", o.dtype,
                 "element type; bf16 and fp16 (16-bit storage, fp32 arithmetic) check each block against the "
                 "error bound derived from rounding")
      ->check(CLI::IsMember({"float", "double", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_flag("--bounds", o.bounds,
               "with --dtype float or double: each block against its derived rounding bound instead of the fixed "
               "tolerance");
  integer_option(app, flags, "--seed", o.seed_arg, "seed of the weights, tokens and dropout masks (0 … 2^63−1)",
                 std::int64_t{0});
  app.add_option("--backend", o.backend, "thread: ThreadComm ranks in this process; mpi: MpiComm (under mpirun)")
      ->check(CLI::IsMember({"thread", "mpi"}))
      ->capture_default_str();
  probability_option(app, flags, "--dropout", o.dropout, "hidden dropout probability");
  probability_option(app, flags, "--attn-dropout", o.attn_dropout,
                     "dropout on the attention probabilities (mask keyed by global sequence, head, query, key)");
  app.add_option("--act", o.act, "MLP activation")->check(CLI::IsMember({"gelu", "gelu-erf", "swiglu"}))->capture_default_str();
  app.add_option("--norm", o.norm, "norm")->check(CLI::IsMember({"layernorm", "rmsnorm"}))->capture_default_str();
  app.add_flag("--no-bias", o.no_bias, "linear layers without biases");
  app.add_flag("--json", o.json, "machine-readable output (JSON on stdout)");
  app.add_flag("--explain", o.explain, "print block 0's derivation as executed");
  app.add_option("--trace", o.trace, "write a Chrome-trace JSON of every rank's compute and collectives to FILE");
  app.add_option("--dump", o.dump, "write DIR/rank<r>.safetensors, DIR/reference.safetensors (the dense twin) and DIR/map.json, for `compare`");
  app.add_flag("-v,--verbose", o.verbose, "print every check");
  app.add_option("--progress", o.progress, "progress line on stderr")->check(CLI::IsMember({"auto", "always", "never"}))->capture_default_str();
  auto fail = [&parsed](const std::string& what) {
    fmt::print(stderr, "shardalg-verify: error: {}\n", what);
    parsed.exit_code = 2;
    return parsed;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    parsed.exit_code = app.exit(e);
    return parsed;
  } catch (const CLI::ParseError& e) {  // "The following arguments were not expected: --x", "--tp: 1 required INT missing"
    return fail(e.what());
  }
  try {
    for (const auto& f : flags)
      if (app.count(f.flag) > 0) f.convert();
  } catch (const ConfigError& e) {
    return fail(e.what());
  }
  parsed.tp_given = app.count("--tp") > 0;
  o.seed = static_cast<std::uint64_t>(o.seed_arg);
  // --pp without --microbatches: one sequence each (validate() refuses a count past an int).
  if (o.pp > 1 && o.microbatches == 0 && o.batch / o.dp <= std::numeric_limits<int>::max())
    o.microbatches = static_cast<int>(o.batch / o.dp);
  return parsed;
}

}  // namespace sv
