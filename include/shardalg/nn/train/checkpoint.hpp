// shardalg/nn/train/checkpoint.hpp — GPT checkpoints that reshard on load. Needs nlohmann-json.
//
// What is stored: the *logical master tensors* (Gpt::masters(): unfused — wq, wk, wv rather than
// the per-rank interleaved QKV; gate and up rather than SwiGLU's interleaved fc1 — and unpadded —
// the real vocabulary rows only), and the optimizer state in the same form. Why: the physical
// layout of a shard depends on the TP size P (which columns of the fused QKV a rank holds, how
// far the vocabulary is padded, which K/V heads are copied), so per-rank shards would need these
// maps on load anyway; logical tensors are read at any P by the same global-index path the
// initialisation uses (from_global), and the file is the model, independent of how it ran. The
// cost is a gather to one writer per tensor: fine for the models this library trains; a model
// too large for one host would store per-rank shards with these maps as metadata instead.
//
// Format (nn/train/checkpoint_files.hpp: written atomically, every byte hashed and verified on load):
//   meta.json     {"format": "shardalg-gpt-checkpoint", "version": 2, "config": {…GptConfig…},
//                  "step": <optimizer steps>, "optimizer": {"kind": "adam"|"sgd", "step": t, …},
//                  "tensors": [{"name", "rows", "cols", "offset", "fnv1a64"}, …], …}
//   tensors.bin   every tensor as little-endian IEEE-754 float64, row-major, at its byte offset
// float models are widened to float64 (exact) and narrowed back on load (exact for values that
// came from float).
//
//   nn::save_checkpoint(dir, model, optimizer);        collective: every rank calls; rank 0 writes
//   auto m = nn::load_checkpoint<T>(dir, group, optimizer, sp);   any TP size, SP on or off
//     (collective: the ranks of `group` read one save, the same, also while another process
//     saves over `dir`: read_checkpoint_files(dir, group))
//   auto m = nn::load_checkpoint<T>(dir, group, optimizer, {.expect = cfg, .optimizer_state = false});
#pragma once

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardalg/nn/train/checkpoint_files.hpp"
#include "shardalg/nn/models/gpt.hpp"

namespace shardalg::nn {

inline nlohmann::json to_json(const GptConfig& c) {
  return {{"vocab", c.vocab},
          {"hidden", c.hidden},
          {"heads", c.heads},
          {"groups", c.groups},
          {"ffn", c.ffn},
          {"layers", c.layers},
          {"seq", c.seq},
          {"batch", c.batch},
          {"activation", c.activation == Activation::gelu_tanh  ? "gelu_tanh"
                         : c.activation == Activation::gelu_erf ? "gelu_erf"
                                                                : "swiglu"},
          {"norm", c.norm == NormKind::layer ? "layernorm" : "rmsnorm"},
          {"bias", c.bias},
          {"eps", c.eps},
          {"dropout", c.dropout},
          {"attn_dropout", c.attn_dropout},
          {"sp", c.sp},
          {"seed", c.seed},
          {"init_std", c.init_std},
          {"vocab_divisor", c.vocab_divisor},
          {"label_smoothing", c.label_smoothing},
          {"ignore_index", c.ignore_index}};
}

/// The GptConfig of `j` (the object at key `prefix` of `r`'s file), every field typed and range
/// checked (CheckpointError "checkpoint: <file>: config.hidden is -32, expected an integer >= 1").
/// Sizes only bounded below here; Gpt::check refuses the combinations a model cannot have.
inline GptConfig gpt_config_from_json(const nlohmann::json& j, const MetaReader& r, std::string_view prefix = "config") {
  if (!j.is_object()) r.fail(std::string(prefix), &j, "an object");
  GptConfig c;
  c.vocab = r.integer(j, prefix, "vocab", 1);
  c.hidden = r.integer(j, prefix, "hidden", 1);
  c.heads = r.integer(j, prefix, "heads", 1);
  c.groups = r.integer(j, prefix, "groups", 0);
  c.ffn = r.integer(j, prefix, "ffn", 0);
  c.layers = r.integer(j, prefix, "layers", 1);
  c.seq = r.integer(j, prefix, "seq", 1);
  c.batch = r.integer(j, prefix, "batch", 1);
  const std::string act = r.one_of(j, prefix, "activation", {"gelu_tanh", "gelu_erf", "swiglu"});
  c.activation = act == "gelu_tanh" ? Activation::gelu_tanh : act == "gelu_erf" ? Activation::gelu_erf : Activation::swiglu;
  c.norm = r.one_of(j, prefix, "norm", {"layernorm", "rmsnorm"}) == "layernorm" ? NormKind::layer : NormKind::rms;
  c.bias = r.boolean(j, prefix, "bias");
  c.eps = r.number(j, prefix, "eps");
  c.dropout = r.number(j, prefix, "dropout");
  // Files written before attn_dropout was saved restore 0, as those versions did (a model that
  // expects another rate refuses them by name: check_config).
  c.attn_dropout = j.contains("attn_dropout") ? r.number(j, prefix, "attn_dropout") : 0.0;
  c.sp = r.boolean(j, prefix, "sp");
  c.seed = r.unsigned_integer(j, prefix, "seed");
  c.init_std = r.number(j, prefix, "init_std");
  c.vocab_divisor = r.integer(j, prefix, "vocab_divisor", 1);
  c.label_smoothing = r.number(j, prefix, "label_smoothing");
  c.ignore_index = r.integer(j, prefix, "ignore_index", std::numeric_limits<std::int64_t>::min());
  return c;
}
/// A GptConfig from JSON alone (the messages name it "GptConfig JSON").
inline GptConfig gpt_config_from_json(const nlohmann::json& j) {
  return gpt_config_from_json(j, MetaReader("GptConfig JSON"), "");
}

namespace detail {
template <class Opt>
nlohmann::json optimizer_json(const Opt& opt) {
  const auto& o = opt.options();
  if constexpr (requires { o.beta1; })
    return {{"kind", "adam"}, {"step", opt.step_count()}, {"lr", o.lr},   {"beta1", o.beta1},
            {"beta2", o.beta2}, {"eps", o.eps},             {"weight_decay", o.weight_decay}};
  else
    return {{"kind", "sgd"}, {"step", opt.step_count()}, {"lr", o.lr}, {"momentum", o.momentum},
            {"weight_decay", o.weight_decay}};
}
}  // namespace detail

/// Save model and optimizer state: every rank calls (the tensors are gathered); rank 0 writes.
template <Element T, class B, class Opt>
void save_checkpoint(const std::filesystem::path& dir, Gpt<T, B>& model, const Opt& opt) {
  Masters all = model.masters();
  for (auto& [k, v] : model.optimizer_masters(opt)) all.emplace("optim." + k, std::move(v));
  Group g = model.group();
  if (g.rank() == 0) {
    nlohmann::json meta{{"config", to_json(model.config())},
                        {"step", model.steps()},
                        {"optimizer", detail::optimizer_json(opt)}};
    write_checkpoint_files(dir, meta, all);
  }
  g.barrier();
}

/// What load_checkpoint checks and restores.
struct LoadOptions {
  /// SP on or off; unset: as saved.
  std::optional<bool> sp = std::nullopt;
  /// The configuration the caller's model has: the saved one must agree on every field that shapes
  /// the state (sizes, layers, activation, norm, bias, eps, dropout, vocab_divisor, seq; the seed
  /// when dropout is on), else a CheckpointError naming the field. Unset: the saved one is taken.
  std::optional<GptConfig> expect = std::nullopt;
  /// Restore the optimizer's state; every parameter's moments must then be in the file. false:
  /// the optimizer starts fresh (step count 0), explicitly.
  bool optimizer_state = true;
};

namespace detail {
/// The fields of the saved configuration that differ from `want` (architecture, data shape, init).
inline void check_config(const std::filesystem::path& dir, const GptConfig& got, const GptConfig& want) {
  const nlohmann::json a = to_json(got), b = to_json(want);
  // What shapes the stored state or the computation it resumes; not the run's choices: SP (any
  // checkpoint loads with it on or off), batch, the loss options, init_std (weights are loaded),
  // and the seed unless dropout (of either kind) draws from it.
  const std::vector<std::string> free = {"sp", "batch", "label_smoothing", "ignore_index", "init_std"};
  for (const auto& [k, v] : b.items()) {
    if (std::find(free.begin(), free.end(), k) != free.end()) continue;
    if (k == "seed" && want.dropout == 0 && got.dropout == 0 && want.attn_dropout == 0 && got.attn_dropout == 0) continue;
    if (!a.contains(k) || a.at(k) != v)
      throw CheckpointError(shardalg::detail::cat("checkpoint: ", (dir / "meta.json").string(), ": config.", k, " is ",
                                                  a.contains(k) ? a.at(k).dump() : std::string("missing"),
                                                  ", the model expects ", v.dump()));
  }
}
}  // namespace detail

namespace detail {
/// What a load needs from the files, checked: the configuration (as the caller expects, SP as
/// asked), the weights, the optimizer state (empty when not restored) and the saved step counts.
struct LoadedState {
  GptConfig cfg;
  Masters weights, state;
  long model_step = 0, optimizer_step = 0;
  bool restore_optimizer = false;
};

/// The sizes of `cfg` against the stored tensors they size, before a model of `cfg` is
/// allocated: the embedding is vocab × hidden, the last layer's w2 is ffn × hidden and no layer
/// past `layers` is stored. (A size the file does not hold is refused here, not allocated.)
inline void check_sizes(const MetaReader& r, const GptConfig& cfg, const Masters& weights) {
  using shardalg::detail::cat;
  const auto shape = [&](const std::string& name, Index rows, Index cols, const std::string& fields) {
    const auto it = weights.find(name);
    if (it == weights.end())
      throw CheckpointError(cat("checkpoint: ", r.file(), ": no tensor ", name, " (config.", fields, " say ", rows, "x",
                                cols, ")"));
    if (it->second.rows() != rows || it->second.cols() != cols)
      throw CheckpointError(cat("checkpoint: ", r.file(), ": config.", fields, " say ", rows, "x", cols, ", tensor ",
                                name, " is ", it->second.rows(), "x", it->second.cols()));
  };
  shape("embedding", cfg.vocab, cfg.hidden, "vocab and hidden");
  shape(cat("layers.", cfg.layers - 1, ".mlp.w2"), cfg.ffn_size(), cfg.hidden, "ffn and hidden");
  const auto past = weights.lower_bound(cat("layers.", cfg.layers, "."));
  if (past != weights.end() && past->first.rfind(cat("layers.", cfg.layers, "."), 0) == 0)
    throw CheckpointError(cat("checkpoint: ", r.file(), ": config.layers is ", cfg.layers, ", but tensor ", past->first,
                              " is stored"));
}

/// Read and check a checkpoint for an optimizer of kind `want` ("adam" or "sgd"), on every rank
/// of `g` (collective: every rank reads the same save; read_checkpoint_files).
inline LoadedState read_for_load(const std::filesystem::path& dir, const Group& g, const LoadOptions& options,
                                 const std::string& want) {
  auto [meta, tensors] = read_checkpoint_files(dir, g);
  const MetaReader r((dir / "meta.json").string());
  LoadedState out;
  out.cfg = gpt_config_from_json(r.object(meta, "", "config"), r);
  if (options.expect) check_config(dir, out.cfg, *options.expect);
  if (options.sp) out.cfg.sp = *options.sp;
  for (auto& [k, v] : tensors) {
    if (k.rfind("optim.", 0) == 0) out.state.emplace(k.substr(6), std::move(v));
    else out.weights.emplace(k, std::move(v));
  }
  check_sizes(r, out.cfg, out.weights);
  out.model_step = r.integer(meta, "", "step");
  out.restore_optimizer = options.optimizer_state;
  if (!options.optimizer_state) {
    out.state.clear();
    return out;
  }
  const auto& oj = r.object(meta, "", "optimizer");
  const std::string kind = r.one_of(oj, "optimizer", "kind", {"adam", "sgd"});
  if (kind != want)
    throw CheckpointError(shardalg::detail::cat("checkpoint: ", r.file(), ": optimizer state is ", kind, ", loading into ", want));
  out.optimizer_step = r.integer(oj, "optimizer", "step");
  // Every parameter has its state once the optimizer has stepped: a missing entry is an error,
  // never a silently reset moment.
  if (out.optimizer_step > 0) {
    const std::vector<std::string> kinds =
        want == "adam" ? std::vector<std::string>{"m.", "v."} : std::vector<std::string>{"momentum."};
    for (const auto& [name, w] : out.weights)
      for (const auto& k : kinds)
        if (!out.state.count(k + name))
          throw CheckpointError(shardalg::detail::cat(
              "checkpoint: ", r.file(), ": optimizer state has no ", k, name, " (after ", out.optimizer_step,
              " steps every parameter has one; load with optimizer_state = false to start the optimizer fresh)"));
  }
  return out;
}
}  // namespace detail

/// Load a checkpoint at this group's TP size (any; SP on or off as options.sp says, else as
/// saved). The optimizer's options are the caller's; its step count and state come from the file.
template <Element T, class B = CpuBackend, class Opt>
Gpt<T, B> load_checkpoint(const std::filesystem::path& dir, const Group& g, Opt& opt, const LoadOptions& options) {
  auto in = detail::read_for_load(dir, g, options, Gpt<T, B>::template has_moments<Opt> ? "adam" : "sgd");
  auto model = Gpt<T, B>::from_masters(in.cfg, in.weights, g);
  model.set_steps(in.model_step);
  if (!in.restore_optimizer) return model;
  if constexpr (requires { opt.set_step_count(0L); }) opt.set_step_count(in.optimizer_step);
  model.load_optimizer(opt, in.state);
  return model;
}

/// load_checkpoint with SP on or off as `sp` says (else as saved), everything else checked.
template <Element T, class B = CpuBackend, class Opt>
Gpt<T, B> load_checkpoint(const std::filesystem::path& dir, const Group& g, Opt& opt, std::optional<bool> sp = {}) {
  return load_checkpoint<T, B>(dir, g, opt, LoadOptions{sp, {}, true});
}

}  // namespace shardalg::nn
