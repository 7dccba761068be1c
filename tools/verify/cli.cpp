// tools/verify/cli.cpp — the flags, their defaults and their checks (CLI11 prints --help and the
// parse errors).
#include "cli.hpp"

#include <CLI/CLI.hpp>

namespace sv {

Parsed parse_options(int argc, char** argv) {
  Parsed parsed;
  Options& o = parsed.options;
  CLI::App app{"shardalg-verify: one forward + backward pass of a small GPT, tensor-parallel vs dense reference"};
  // Ranges are checked in validate(), one line each ("--tp 0 must be at least 1"), not by CLI11.
  app.add_option("--tp", o.tp, "tensor-parallel size (threads); under mpirun the process count");
  app.add_option("--dp", o.dp, "data-parallel replicas: a dp × tp mesh (threads: dp·tp ranks; mpirun: the process count is dp·tp)")
      ->capture_default_str();
  app.add_flag("--zero", o.zero, "with --dp: the sharded optimizer (ZeRO-1: reduce_scatter + all_gather over dp)");
  app.add_option("--bucket", o.bucket, "with --dp: values per gradient bucket (0: one bucket per tensor)")->capture_default_str();
  app.add_option("--pp", o.pp, "pipeline ranks: a dp × pp × tp mesh, nn::PipelineGpt under a schedule (threads: dp·pp·tp ranks)")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "with --pp: the pipeline schedule")
      ->check(CLI::IsMember({"afab", "1f1b", "interleaved", "zb-h1"}, CLI::ignore_case))
      ->transform(CLI::IsMember({"afab", "1f1b", "interleaved", "zb-h1"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--microbatches", o.microbatches, "with --pp: micro-batches per replica (0: one sequence each, --batch / --dp)")->capture_default_str();
  app.add_flag("--dealloc", o.dealloc, "with --pp: release each stage output once sent (output deallocation)");
  app.add_flag("--overlap-p2p", o.overlap, "with --pp: post the next receive before computing (warm-up/flush overlap)");
  app.add_flag("--sp", o.sp, "sequence parallelism (RowSharded activations between blocks)");
  app.add_option("--layers", o.layers, "transformer blocks")->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size h")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads")->capture_default_str();
  app.add_option("--groups", o.groups, "query groups for GQA (0: = heads, MHA)")->capture_default_str();
  app.add_option("--ffn", o.ffn, "MLP hidden size (0: 4·hidden)")->capture_default_str();
  app.add_option("--seq", o.seq, "sequence length s")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per batch b")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size (padded to a multiple of divisor·TP)")->capture_default_str();
  app.add_option("--vocab-divisor", o.vocab_divisor, "Megatron's make-vocab-size-divisible-by")->capture_default_str();
  app.add_option("--dtype", o.dtype, "element type")->check(CLI::IsMember({"float", "double"}))->capture_default_str();
  app.add_option("--seed", o.seed_arg, "seed of the weights, tokens and dropout masks (0 … 2^63−1)")->capture_default_str();
  app.add_option("--backend", o.backend, "thread: ThreadComm ranks in this process; mpi: MpiComm (under mpirun)")
      ->check(CLI::IsMember({"thread", "mpi"}))
      ->capture_default_str();
  app.add_option("--dropout", o.dropout, "hidden dropout probability")->capture_default_str();
  app.add_option("--attn-dropout", o.attn_dropout,
                 "dropout on the attention probabilities (mask keyed by global sequence, head, query, key)")
      ->capture_default_str();
  app.add_option("--act", o.act, "MLP activation")->check(CLI::IsMember({"gelu", "gelu-erf", "swiglu"}))->capture_default_str();
  app.add_option("--norm", o.norm, "norm")->check(CLI::IsMember({"layernorm", "rmsnorm"}))->capture_default_str();
  app.add_flag("--no-bias", o.no_bias, "linear layers without biases");
  app.add_flag("--json", o.json, "machine-readable output (JSON on stdout)");
  app.add_flag("--explain", o.explain, "print block 0's derivation as executed");
  app.add_option("--trace", o.trace, "write a Chrome-trace JSON of every rank's compute and collectives to FILE");
  app.add_flag("-v,--verbose", o.verbose, "print every check");
  app.add_option("--progress", o.progress, "progress line on stderr")->check(CLI::IsMember({"auto", "always", "never"}))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_code = app.exit(e);
    return parsed;
  }
  parsed.tp_given = app.count("--tp") > 0;
  o.seed = static_cast<std::uint64_t>(o.seed_arg);
  if (o.pp > 1 && o.microbatches == 0 && o.dp > 0) o.microbatches = static_cast<int>(o.batch / o.dp);
  return parsed;
}

}  // namespace sv
