// shardalg/verify/layout_map.hpp — the layout of each tensor of another framework's dump: a mesh
// (named axes, the last varying fastest over the ranks) and rules that map tensor-name patterns to
// a layout per axis. Read from a small JSON file (`read_layout_map`), or a preset for Megatron-LM's
// and PyTorch `parallelize_module`'s names. docs/compare.md gives the format.
//
// The layouts are those of shardalg's types, said of the tensor as it is stored:
//   R           every rank of the axis holds the same whole tensor
//   I           the same, an invariant (the check is the same)
//   Shard(d)    split into contiguous blocks along dimension d (negative: from the end), rank k
//               holding block k; Row = Shard(0), C = Shard(-1). PyTorch stores a Linear's weight
//               [out, in], the transpose of shardalg's W[in, out]: a column-parallel W[C] is
//               stored Shard(0), a row-parallel W[Row] Shard(-1).
//   Partial     each rank holds a summand; the tensor is the sum over the axis
//   Partial→R   should be R, and is the all_reduce of a Partial (a sequence-parallel norm weight's
//               gradient): checked as R, and a disagreement is tested as the Partial left unreduced
// An axis a rule does not name is R on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardalg/base/errors.hpp"

namespace shardalg::verify {

/// A layout map that cannot be read, or that names no layout for a tensor.
struct LayoutMapError : Error {
  using Error::Error;
};

namespace detail {
using shardalg::detail::cat;
}  // namespace detail

/// One mesh axis's layout of a stored tensor.
struct AxisLayout {
  enum Kind { R, I, Shard, Partial, PartialToR } kind = R;
  int dim = 0;  // Shard's dimension; negative counts from the end
  friend bool operator==(const AxisLayout&, const AxisLayout&) = default;
};

inline std::string layout_text(AxisLayout l) {
  switch (l.kind) {
    case AxisLayout::R: return "R";
    case AxisLayout::I: return "I";
    case AxisLayout::Shard: return "Shard(" + std::to_string(l.dim) + ")";
    case AxisLayout::Partial: return "Partial";
    case AxisLayout::PartialToR: return "Partial->R";
  }
  return "?";
}

/// "R", "I", "Row" (= Shard(0)), "C" (= Shard(-1)), "Shard(d)", "Partial", "Partial->R" or "Partial→R".
inline AxisLayout parse_axis_layout(std::string_view s) {
  if (s == "R") return {AxisLayout::R, 0};
  if (s == "I") return {AxisLayout::I, 0};
  if (s == "Row") return {AxisLayout::Shard, 0};
  if (s == "C") return {AxisLayout::Shard, -1};
  if (s == "Partial") return {AxisLayout::Partial, 0};
  if (s == "Partial->R" || s == "Partial\u2192R") return {AxisLayout::PartialToR, 0};
  if (s.starts_with("Shard(") && s.ends_with(")") && s.size() > 7) {
    const std::string d(s.substr(6, s.size() - 7));
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(d, &used);
    } catch (...) {
      used = 0;
    }
    if (used == d.size() && used > 0 && v > -64 && v < 64) return {AxisLayout::Shard, v};
  }
  throw LayoutMapError(detail::cat("layout '", s, "' is not one of R, I, Row, C, Shard(d), Partial, Partial->R"));
}

/// `*` matches any run of characters (dots included); every other character matches itself.
inline bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

struct LayoutRule {
  std::string match;
  std::vector<std::pair<std::string, AxisLayout>> layout;  // axis name → layout; others R
};

struct LayoutMap {
  std::vector<std::pair<std::string, int>> mesh;  // axes in order; the last varies fastest
  std::vector<LayoutRule> rules;                   // the first match wins
  std::string grad_suffix = ".grad";
  std::string preset;                              // the preset its rules came from, if any

  int ranks() const {
    int n = 1;
    for (const auto& a : mesh) n *= a.second;
    return n;
  }
  /// The rank's coordinate on each axis (row-major: the last axis varies fastest).
  std::vector<int> coords(int rank) const {
    std::vector<int> c(mesh.size());
    for (std::size_t i = mesh.size(); i-- > 0;) {
      c[i] = rank % mesh[i].second;
      rank /= mesh[i].second;
    }
    return c;
  }
  bool is_grad(std::string_view name) const { return !grad_suffix.empty() && name.ends_with(grad_suffix); }
  /// The first matching rule's layout on each axis, in mesh order.
  std::vector<AxisLayout> layout_of(std::string_view name) const {
    for (const auto& r : rules) {
      if (!glob_match(r.match, name)) continue;
      std::vector<AxisLayout> out(mesh.size());
      for (const auto& [axis, l] : r.layout)
        for (std::size_t i = 0; i < mesh.size(); ++i)
          if (mesh[i].first == axis) out[i] = l;
      return out;
    }
    throw LayoutMapError(detail::cat("no rule of the layout map matches tensor '", name, "'"));
  }
  std::string layout_text_of(std::string_view name) const {
    const auto ls = layout_of(name);
    std::string s;
    for (std::size_t i = 0; i < ls.size(); ++i) s += (i ? ", " : "") + mesh[i].first + ":" + layout_text(ls[i]);
    return s;
  }
};

namespace detail {
inline LayoutRule rule(std::string match, const char* axis, const char* l) {
  return {std::move(match), {{axis, parse_axis_layout(l)}}};
}
}  // namespace detail

/// The preset rules for a framework's names, all on the axis `tp`:
///   megatron     Megatron-Core's GPT layer names, tensor parallel without sequence parallelism
///   megatron-sp  the same with sequence parallelism (activations outside the TP regions Shard(0)
///                on the sequence; norm weights' and row-parallel biases' gradients Partial→R)
///   torch-tp     PyTorch's tensor-parallel tutorial (Llama names; ColwiseParallel wq wk wv w1 w3
///                and the output, RowwiseParallel wo w2 and the token embedding)
/// Activations are named `<module>.output`, gradients `<tensor>.grad`; `loss` is R.
inline std::vector<LayoutRule> preset_rules(std::string_view name) {
  using detail::rule;
  std::vector<LayoutRule> r;
  if (name == "megatron" || name == "megatron-sp") {
    const bool sp = name == "megatron-sp";
    const char* seq = sp ? "Shard(0)" : "R";        // an activation outside the TP regions
    const char* rep_grad = sp ? "Partial->R" : "R";  // a replicated parameter's gradient
    for (const char* m : {"linear_qkv", "linear_fc1"}) {
      r.push_back(rule(std::string("*.") + m + ".weight*", "tp", "Shard(0)"));
      r.push_back(rule(std::string("*.") + m + ".bias*", "tp", "Shard(0)"));
      r.push_back(rule(std::string("*.") + m + ".output*", "tp", "Shard(-1)"));
    }
    for (const char* m : {"linear_proj", "linear_fc2"}) {
      r.push_back(rule(std::string("*.") + m + ".weight*", "tp", "Shard(-1)"));
      r.push_back(rule(std::string("*.") + m + ".bias.grad", "tp", rep_grad));
      r.push_back(rule(std::string("*.") + m + ".bias", "tp", "R"));
      r.push_back(rule(std::string("*.") + m + ".output*", "tp", seq));
    }
    r.push_back(rule("*.core_attention.output*", "tp", "Shard(-1)"));
    r.push_back(rule("*.activation_func.output*", "tp", "Shard(-1)"));
    for (const char* m : {"input_layernorm", "pre_mlp_layernorm", "final_layernorm"}) {
      r.push_back(rule(std::string("*.") + m + ".weight.grad", "tp", rep_grad));
      r.push_back(rule(std::string("*.") + m + ".bias.grad", "tp", rep_grad));
      r.push_back(rule(std::string("*.") + m + ".weight", "tp", "R"));
      r.push_back(rule(std::string("*.") + m + ".bias", "tp", "R"));
      r.push_back(rule(std::string("*.") + m + ".output*", "tp", seq));
    }
    r.push_back(rule("*word_embeddings.weight*", "tp", "Shard(0)"));  // vocab-parallel
    r.push_back(rule("*output_layer.weight*", "tp", "Shard(0)"));
    r.push_back(rule("*output_layer.output*", "tp", "Shard(-1)"));
    r.push_back(rule("*.input", "tp", seq));
    r.push_back(rule("*.input.grad", "tp", seq));
    r.push_back(rule("*.output", "tp", seq));
    r.push_back(rule("*.output.grad", "tp", seq));
    r.push_back(rule("loss", "tp", "R"));
  } else if (name == "torch-tp") {
    for (const char* m : {"attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"}) {
      r.push_back(rule(std::string("*") + m + ".weight*", "tp", "Shard(0)"));
      r.push_back(rule(std::string("*") + m + ".output*", "tp", "Shard(-1)"));
    }
    for (const char* m : {"attention.wo", "feed_forward.w2"})
      r.push_back(rule(std::string("*") + m + ".weight*", "tp", "Shard(-1)"));
    r.push_back(rule("tok_embeddings.weight*", "tp", "Shard(0)"));
    r.push_back(rule("output.weight*", "tp", "Shard(0)"));
    r.push_back(rule("*norm.weight*", "tp", "R"));
    r.push_back(rule("loss", "tp", "R"));
  } else {
    throw LayoutMapError(detail::cat("preset '", name, "' is not one of megatron, megatron-sp, torch-tp"));
  }
  return r;
}

/// Reads a layout map from its JSON text (`source` names it in errors):
///   {"mesh": {"tp": 4}, "preset": "megatron-sp", "grad_suffix": ".grad",
///    "rules": [{"match": "*.linear_fc1.weight", "layout": {"tp": "Shard(0)"}}, …]}
/// The file's rules come before the preset's (so they override it); at least one of the two.
inline LayoutMap parse_layout_map(const std::string& text, const std::string& source) {
  using detail::cat;
  auto fail = [&](const std::string& what) -> LayoutMapError { return LayoutMapError(cat("layout map ", source, ": ", what)); };
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw fail(cat("not valid JSON (at byte ", std::min(e.byte, text.size()), " of ", text.size(), ")"));
  }
  if (!j.is_object()) throw fail("not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "mesh" && it.key() != "rules" && it.key() != "preset" && it.key() != "grad_suffix")
      throw fail(cat("unknown key '", it.key(), "' (mesh, rules, preset, grad_suffix)"));
  LayoutMap m;
  if (!j.contains("mesh") || !j["mesh"].is_object() || j["mesh"].empty())
    throw fail("'mesh' must be an object of axis sizes, e.g. {\"tp\": 4}");
  std::int64_t world = 1;
  for (auto it = j["mesh"].begin(); it != j["mesh"].end(); ++it) {
    const auto& v = it.value();
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 65536)
      throw fail(cat("mesh axis '", it.key(), "' is ", v.dump(), ", not a size from 1 to 65536"));
    world *= v.get<std::int64_t>();
    if (world > 65536) throw fail(cat("the mesh has more than 65536 ranks"));
    m.mesh.emplace_back(it.key(), v.get<int>());
  }
  if (j.contains("grad_suffix")) {
    if (!j["grad_suffix"].is_string()) throw fail("'grad_suffix' is not a string");
    m.grad_suffix = j["grad_suffix"].get<std::string>();
  }
  if (j.contains("rules")) {
    if (!j["rules"].is_array()) throw fail("'rules' is not a list");
    std::size_t i = 0;
    for (const auto& r : j["rules"]) {
      const std::string at = cat("rule ", i++, ": ");
      if (!r.is_object() || !r.contains("match") || !r["match"].is_string() || !r.contains("layout") || !r["layout"].is_object())
        throw fail(cat(at, "must be {\"match\": \"<pattern>\", \"layout\": {\"<axis>\": \"<layout>\"}}"));
      LayoutRule rule{r["match"].get<std::string>(), {}};
      for (auto it = r["layout"].begin(); it != r["layout"].end(); ++it) {
        bool known = false;
        for (const auto& a : m.mesh) known = known || a.first == it.key();
        if (!known) throw fail(cat(at, "axis '", it.key(), "' is not in the mesh"));
        if (!it.value().is_string()) throw fail(cat(at, "the layout on '", it.key(), "' is not a string"));
        try {
          rule.layout.emplace_back(it.key(), parse_axis_layout(it.value().get<std::string>()));
        } catch (const LayoutMapError& e) {
          throw fail(cat(at, e.what()));
        }
      }
      m.rules.push_back(std::move(rule));
    }
  }
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw fail("'preset' is not a string");
    m.preset = j["preset"].get<std::string>();
    try {
      for (auto& r : preset_rules(m.preset)) m.rules.push_back(std::move(r));
    } catch (const LayoutMapError& e) {
      throw fail(e.what());
    }
    bool has_tp = false;
    for (const auto& a : m.mesh) has_tp = has_tp || a.first == "tp";
    if (!has_tp) throw fail(cat("preset '", m.preset, "' names the axis 'tp', which the mesh lacks"));
  }
  if (m.rules.empty()) throw fail("no 'rules' and no 'preset'");
  return m;
}

inline LayoutMap read_layout_map(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw LayoutMapError(detail::cat("layout map ", path.string(), ": cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_layout_map(ss.str(), path.string());
}

}  // namespace shardalg::verify
