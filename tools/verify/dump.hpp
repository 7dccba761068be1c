// tools/verify/dump.hpp — --dump DIR: the run as another framework would give it to
// `shardalg-verify compare`. Each rank writes DIR/rank<r>.safetensors with its local blocks (the
// element type of the run); rank 0 writes DIR/reference.safetensors with the dense twin's whole
// tensors (reference/dense_layers.hpp, F64) and DIR/map.json, whose rules are the tensors' layouts
// read off their types (X[Row] → "Row", W[C] → "C", …). Names follow Megatron-Core's; the weights
// are stored as shardalg holds them, W[in, out] (so a column-parallel weight is "C" here where a
// PyTorch dump of it is Shard(0)).
//
// Not dumped: the fused Q|K|V weight and SwiGLU's gate|up, whose rank blocks are [q_r | k_r | v_r]
// (a per-rank interleaving that no single Shard(d) describes), and the logits (padded to the
// vocabulary's multiple; the loss and every gradient are there). The embedding's gradient keeps its
// padded rows; the reference's are zero, as the padding's gradient must be.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "model.hpp"
#include "options.hpp"
#include "shardalg/verify/safetensors.hpp"

namespace sv {

namespace st = shardalg::verify;

class Dumper {
 public:
  Dumper(bool on, bool root, bool is_double) : on_(on), root_(root), dtype_(is_double ? st::StDtype::F64 : st::StDtype::F32) {}

  /// One tensor: this rank's block of `x`; on rank 0 also the dense value `dense()` (rows beyond
  /// it, a padding, are zero in the reference).
  template <class T, class L, class B>
  void add(const std::string& name, const shardalg::Sharded<T, L, B>& x, const std::function<M()>& dense) {
    if (!on_) return;
    const auto& b = x.local();
    std::vector<double> v;
    v.reserve(static_cast<std::size_t>(b.size()));
    for (Index i = 0; i < b.rows(); ++i)
      for (Index j = 0; j < b.cols(); ++j) v.push_back(static_cast<double>(b(i, j)));
    mine_.push_back({name, dtype_, {b.rows(), b.cols()}, std::move(v)});
    rules_.push_back({{"match", name}, {"layout", {{"tp", std::string(L::notation)}}}});
    if (!root_) return;
    const M d = dense();
    const Index rows = std::max<Index>(d.rows(), x.rows());
    std::vector<double> r(static_cast<std::size_t>(rows * d.cols()), 0.0);
    for (Index i = 0; i < d.rows(); ++i)
      for (Index j = 0; j < d.cols(); ++j) r[static_cast<std::size_t>(i * d.cols() + j)] = d(i, j);
    ref_.push_back({name, st::StDtype::F64, {rows, d.cols()}, std::move(r)});
  }
  /// A scalar every rank holds (R), e.g. the mean loss.
  void scalar(const std::string& name, double mine, double dense) {
    if (!on_) return;
    mine_.push_back({name, dtype_, {}, {mine}});
    rules_.push_back({{"match", name}, {"layout", {{"tp", "R"}}}});
    if (root_) ref_.push_back({name, st::StDtype::F64, {}, {dense}});
  }
  /// Writes the files (each atomically).
  void write(const std::string& dir, int rank, int p) const {
    if (!on_) return;
    const std::filesystem::path d(dir);
    st::write_safetensors(d / ("rank" + std::to_string(rank) + ".safetensors"), mine_, {{"format", "shardalg"}});
    if (!root_) return;
    st::write_safetensors(d / "reference.safetensors", ref_, {{"format", "shardalg"}});
    const nlohmann::ordered_json map{{"mesh", {{"tp", p}}}, {"rules", rules_}};
    const std::string text = map.dump(1) + "\n";
    const std::vector<std::byte> body(reinterpret_cast<const std::byte*>(text.data()),
                                      reinterpret_cast<const std::byte*>(text.data() + text.size()));
    st::detail::write_file_atomically(d / "map.json", {}, body, "--dump");
  }

 private:
  bool on_, root_;
  st::StDtype dtype_;
  std::vector<st::TensorOut> mine_, ref_;
  nlohmann::ordered_json rules_ = nlohmann::ordered_json::array();
};

}  // namespace sv
