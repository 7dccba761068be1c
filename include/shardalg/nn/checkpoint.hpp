// shardalg/nn/checkpoint.hpp — GPT checkpoints that reshard on load. Needs nlohmann-json.
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
// Format: a directory with
//   meta.json     {"format": "shardalg-gpt-checkpoint", "version": 1, "config": {…GptConfig…},
//                  "step": <optimizer steps>, "optimizer": {"kind": "adam"|"sgd", "step": t, …},
//                  "tensors": [{"name", "rows", "cols", "offset"}, …]}
//   tensors.bin   every tensor as little-endian IEEE-754 float64, row-major, at its byte offset
// float models are widened to float64 (exact) and narrowed back on load (exact for values that
// came from float).
//
//   nn::save_checkpoint(dir, model, optimizer);        collective: every rank calls; rank 0 writes
//   auto m = nn::load_checkpoint<T>(dir, group, optimizer, sp);   any TP size, SP on or off
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardalg/nn/gpt.hpp"

namespace shardalg::nn {

struct CheckpointError : Error {
  using Error::Error;
};

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
          {"sp", c.sp},
          {"seed", c.seed},
          {"init_std", c.init_std},
          {"vocab_divisor", c.vocab_divisor},
          {"label_smoothing", c.label_smoothing},
          {"ignore_index", c.ignore_index}};
}

inline GptConfig gpt_config_from_json(const nlohmann::json& j) {
  GptConfig c;
  c.vocab = j.at("vocab");
  c.hidden = j.at("hidden");
  c.heads = j.at("heads");
  c.groups = j.at("groups");
  c.ffn = j.at("ffn");
  c.layers = j.at("layers");
  c.seq = j.at("seq");
  c.batch = j.at("batch");
  const std::string act = j.at("activation");
  c.activation = act == "gelu_tanh" ? Activation::gelu_tanh : act == "gelu_erf" ? Activation::gelu_erf : Activation::swiglu;
  c.norm = j.at("norm") == "layernorm" ? NormKind::layer : NormKind::rms;
  c.bias = j.at("bias");
  c.eps = j.at("eps");
  c.dropout = j.at("dropout");
  c.sp = j.at("sp");
  c.seed = j.at("seed");
  c.init_std = j.at("init_std");
  c.vocab_divisor = j.at("vocab_divisor");
  c.label_smoothing = j.at("label_smoothing");
  c.ignore_index = j.at("ignore_index");
  return c;
}

/// Write meta.json and tensors.bin (one process; no communication).
inline void write_checkpoint_files(const std::filesystem::path& dir, const nlohmann::json& meta_in, const Masters& tensors) {
  static_assert(std::endian::native == std::endian::little, "checkpoint: tensors.bin is little-endian");
  std::filesystem::create_directories(dir);
  nlohmann::json meta = meta_in;
  meta["format"] = "shardalg-gpt-checkpoint";
  meta["version"] = 1;
  meta["tensors"] = nlohmann::json::array();
  std::ofstream bin(dir / "tensors.bin", std::ios::binary);
  if (!bin) throw CheckpointError(shardalg::detail::cat("checkpoint: cannot write ", (dir / "tensors.bin").string()));
  std::uint64_t offset = 0;
  std::vector<double> row;
  for (const auto& [name, m] : tensors) {
    meta["tensors"].push_back({{"name", name}, {"rows", m.rows()}, {"cols", m.cols()}, {"offset", offset}});
    row.resize(static_cast<std::size_t>(m.cols()));
    for (Index r = 0; r < m.rows(); ++r) {
      for (Index c = 0; c < m.cols(); ++c) row[static_cast<std::size_t>(c)] = m(r, c);
      bin.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(double)));
    }
    offset += static_cast<std::uint64_t>(m.size()) * sizeof(double);
  }
  std::ofstream(dir / "meta.json") << meta.dump(2) << '\n';
}

/// Read meta.json and tensors.bin.
inline std::pair<nlohmann::json, Masters> read_checkpoint_files(const std::filesystem::path& dir) {
  std::ifstream mf(dir / "meta.json");
  if (!mf) throw CheckpointError(shardalg::detail::cat("checkpoint: cannot read ", (dir / "meta.json").string()));
  const nlohmann::json meta = nlohmann::json::parse(mf);
  if (meta.value("format", "") != "shardalg-gpt-checkpoint" || meta.value("version", 0) != 1)
    throw CheckpointError(shardalg::detail::cat("checkpoint: ", (dir / "meta.json").string(),
                                                " is not a version-1 shardalg GPT checkpoint"));
  std::ifstream bin(dir / "tensors.bin", std::ios::binary);
  if (!bin) throw CheckpointError(shardalg::detail::cat("checkpoint: cannot read ", (dir / "tensors.bin").string()));
  Masters out;
  std::vector<double> buf;
  for (const auto& t : meta.at("tensors")) {
    const Index rows = t.at("rows"), cols = t.at("cols");
    const std::uint64_t offset = t.at("offset");
    buf.resize(static_cast<std::size_t>(rows * cols));
    bin.seekg(static_cast<std::streamoff>(offset));
    bin.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size() * sizeof(double)));
    if (!bin)
      throw CheckpointError(shardalg::detail::cat("checkpoint: tensors.bin is truncated at ", t.at("name").get<std::string>()));
    Eigen::MatrixXd m(rows, cols);
    for (Index r = 0; r < rows; ++r)
      for (Index c = 0; c < cols; ++c) m(r, c) = buf[static_cast<std::size_t>(r * cols + c)];
    out.emplace(t.at("name").get<std::string>(), std::move(m));
  }
  return {meta, std::move(out)};
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

/// Load a checkpoint at this group's TP size (any; SP on or off as `sp` says, else as saved).
/// The optimizer's options are the caller's; its step count and state come from the file.
template <Element T, class B = CpuBackend, class Opt>
Gpt<T, B> load_checkpoint(const std::filesystem::path& dir, const Group& g, Opt& opt, std::optional<bool> sp = {}) {
  auto [meta, tensors] = read_checkpoint_files(dir);
  GptConfig cfg = gpt_config_from_json(meta.at("config"));
  if (sp) cfg.sp = *sp;
  Masters weights, state;
  for (auto& [k, v] : tensors) {
    if (k.rfind("optim.", 0) == 0) state.emplace(k.substr(6), std::move(v));
    else weights.emplace(k, std::move(v));
  }
  auto model = Gpt<T, B>::from_masters(cfg, weights, g);
  model.set_steps(meta.at("step").get<long>());
  const auto& oj = meta.at("optimizer");
  const std::string want = Gpt<T, B>::template has_moments<Opt> ? "adam" : "sgd";
  if (oj.at("kind") != want)
    throw CheckpointError(shardalg::detail::cat("checkpoint: optimizer state is ", oj.at("kind").get<std::string>(),
                                                ", loading into ", want));
  if constexpr (requires { opt.set_step_count(0L); }) opt.set_step_count(oj.at("step").get<long>());
  model.load_optimizer(opt, state);
  return model;
}

}  // namespace shardalg::nn
