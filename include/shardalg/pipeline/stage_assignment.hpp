// shardalg/pipeline/stage_assignment.hpp — Megatron-LM's `pipeline_model_parallel_layout`: which
// layers each pipeline stage holds, written as one string.
//
//   "Et*3|(tt|)*29,m|L"   (DeepSeek-V3 on PP = 16)
//
// The alphabet: E the embedding, t a decoder (transformer) layer, m a multi-token-prediction
// layer, L the loss (output layer + loss); '|' ends a stage. Repeats: x*n is n copies of the
// character x, (…)*n is n copies of the group; commas are cosmetic and ignored. The example
// expands to "Ettt|" + "tt|" × 29 + "m|L": 32 stages.
//
// Stages and ranks. With PP pipeline ranks and S stages, S must be a multiple of PP, and
// VPP = S/PP is the number of virtual stages (model chunks) per rank: stage i lives on
// pp rank i mod PP as virtual stage i div PP — the stages go round the ranks, as the interleaved
// schedule needs (schedule.hpp: chunk c of rank r is stage c·p + r). The example at PP = 16:
//
//   pp rank   vp stage 0     vp stage 1
//   0         E + 3t         2t
//   1 … 13    2t             2t
//   14        2t             m
//   15        2t             L
//
// Layer ids. The decoder layers are numbered in stage order: a stage's first layer id is the
// number of decoder layers in all stages before it (Megatron-LM's get_layer_offset, which sums
// over (vp stage < vpp, every pp rank) and (vp stage = vpp, pp rank < this one) — the stages
// before this one in the order above). Ids start at 0, as in Megatron-LM's get_layer_id_list.
//
// Checks, each a PipelineLayoutError naming the values: an unknown character, unbalanced
// parentheses, a '*' without a count or without something to repeat, exactly one E and it is
// the first layer of the first stage, exactly one L and it is the last layer of the last stage,
// as many t as the model has decoder layers, S divisible by PP. This parser is a superset of
// Megatron-LM's regular expressions: groups may nest and a group without *n is allowed.
//
// 'm' is parsed and placed like any layer, but shardalg has no multi-token-prediction head:
// check_buildable() refuses a layout that asks for one, by stage.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardalg/pipeline/errors.hpp"

namespace shardalg::pipeline {

enum class LayerType { embedding, decoder, mtp, loss };

/// The layout-string character of a layer type: E, t, m, L.
inline char layer_char(LayerType t) {
  switch (t) {
    case LayerType::embedding: return 'E';
    case LayerType::decoder: return 't';
    case LayerType::mtp: return 'm';
    case LayerType::loss: return 'L';
  }
  return '?';
}

/// The most layers (characters, '|' included) a layout string may expand to.
inline constexpr std::size_t max_layout_length = 1'000'000;

namespace detail {

using ::shardalg::detail::cat;

/// Expands repeats into a flat string of E, t, m, L and '|' (recursive descent):
///   sequence := item*          item := atom ('*' count)?          atom := E | t | m | L | '|' | '(' sequence ')'
/// Commas are dropped first; `where[i]` keeps each remaining character's position in the text
/// the user wrote, for the error messages.
class LayoutExpander {
 public:
  explicit LayoutExpander(std::string_view text) : text_(text) {
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] != ',') {
        clean_ += text[i];
        where_.push_back(i);
      }
  }

  /// The whole text expanded (at depth 0 a ')' throws, so this reads to the end).
  std::string expand() { return sequence(0); }

 private:
  std::string_view text_;
  std::string clean_;
  std::vector<std::size_t> where_;
  std::size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw PipelineLayoutError(cat("pipeline layout \"", text_, "\": ", what));
  }
  std::size_t pos(std::size_t k) const { return where_[k]; }

  // A sequence of items, up to the end of the text (depth 0) or a ')' (depth > 0; the caller
  // consumes it).
  std::string sequence(int depth) {
    std::string out;
    while (i_ < clean_.size()) {
      const char c = clean_[i_];
      if (c == ')') {
        if (depth == 0) fail(cat("')' at position ", pos(i_), " has no matching '('"));
        return out;
      }
      std::string piece = atom(depth);
      std::size_t count = 1;
      if (i_ < clean_.size() && clean_[i_] == '*') count = repeat_count();
      if (piece.size() * count > max_layout_length - out.size())
        fail(cat("expands to more than ", max_layout_length, " layers"));
      for (std::size_t k = 0; k < count; ++k) out += piece;
    }
    return out;
  }

  std::string atom(int depth) {
    const char c = clean_[i_];
    if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
      ++i_;
      return std::string(1, c);
    }
    if (c == '(') {
      const std::size_t open = i_++;
      std::string inner = sequence(depth + 1);
      if (i_ >= clean_.size()) fail(cat("'(' at position ", pos(open), " is never closed"));
      ++i_;  // the ')'
      return inner;
    }
    if (c == '*') fail(cat("'*' at position ", pos(i_), " has nothing to repeat"));
    if (std::isdigit(static_cast<unsigned char>(c)))
      fail(cat("digit '", c, "' at position ", pos(i_), " is not a repeat count (a count follows '*')"));
    fail(cat("unknown character '", c, "' at position ", pos(i_),
             " (a layout has E, t, m, L, '|', '(', ')', '*' with a count, and commas)"));
  }

  // '*' followed by decimal digits.
  std::size_t repeat_count() {
    const std::size_t star = i_++;
    std::size_t n = 0, digits = 0;
    while (i_ < clean_.size() && std::isdigit(static_cast<unsigned char>(clean_[i_]))) {
      n = n * 10 + static_cast<std::size_t>(clean_[i_] - '0');
      ++i_;
      if (++digits > 7) fail(cat("the repeat count after '*' at position ", pos(star), " is too large"));
    }
    if (digits == 0) fail(cat("'*' at position ", pos(star), " needs a repeat count"));
    return n;
  }
};

}  // namespace detail

/// The stages of a layout string, in stage order (no check of E, L or counts): the string
/// expanded and split at '|'.
inline std::vector<std::vector<LayerType>> parse_layout_stages(std::string_view text) {
  const std::string flat = detail::LayoutExpander(text).expand();
  std::vector<std::vector<LayerType>> stages(1);
  for (char c : flat) {
    switch (c) {
      case '|': stages.emplace_back(); break;
      case 'E': stages.back().push_back(LayerType::embedding); break;
      case 't': stages.back().push_back(LayerType::decoder); break;
      case 'm': stages.back().push_back(LayerType::mtp); break;
      case 'L': stages.back().push_back(LayerType::loss); break;
      default: break;  // the expander emits nothing else
    }
  }
  return stages;
}

/// A parsed and checked layout: the stages, and where each lives.
struct LayerLayout {
  std::string text;                              // as written
  int pp = 0;                                    // pipeline-parallel size
  int vpp = 0;                                   // virtual stages per rank: stages.size() / pp
  std::vector<std::vector<LayerType>> stages;    // stage i on (pp rank i mod pp, vp stage i div pp)

  /// The stage index of (pp rank, vp stage): vp_stage·pp + pp_rank.
  int stage_index(int pp_rank, int vp_stage) const {
    if (pp_rank < 0 || pp_rank >= pp || vp_stage < 0 || vp_stage >= vpp)
      throw PipelineLayoutError(detail::cat("pipeline layout \"", text, "\": (pp rank ", pp_rank, ", vp stage ",
                                            vp_stage, ") is outside pp = ", pp, ", vpp = ", vpp));
    return vp_stage * pp + pp_rank;
  }

  /// The layers of (pp rank, vp stage), in order.
  const std::vector<LayerType>& at(int pp_rank, int vp_stage) const {
    return stages[static_cast<std::size_t>(stage_index(pp_rank, vp_stage))];
  }

  /// How many layers of `type` (pp rank, vp stage) builds (Megatron-LM's get_num_layers_to_build).
  int num_layers_to_build(LayerType type, int pp_rank, int vp_stage) const {
    return count_in(at(pp_rank, vp_stage), type);
  }

  /// The global index of the first `type` layer of (pp rank, vp stage): the number of `type`
  /// layers in all stages before it (Megatron-LM's get_layer_offset). 0-based.
  int layer_offset(LayerType type, int pp_rank, int vp_stage) const {
    const int here = stage_index(pp_rank, vp_stage);
    int offset = 0;
    for (int i = 0; i < here; ++i) offset += count_in(stages[static_cast<std::size_t>(i)], type);
    return offset;
  }

  /// The global indices of the `type` layers of (pp rank, vp stage), 0-based
  /// (Megatron-LM's get_layer_id_list).
  std::vector<int> layer_ids(LayerType type, int pp_rank, int vp_stage) const {
    const int first = layer_offset(type, pp_rank, vp_stage);
    std::vector<int> ids;
    for (int k = 0; k < num_layers_to_build(type, pp_rank, vp_stage); ++k) ids.push_back(first + k);
    return ids;
  }

  /// Layers of `type` in the whole model.
  int count(LayerType type) const {
    int n = 0;
    for (const auto& st : stages) n += count_in(st, type);
    return n;
  }

  /// One rank's stages in words, vp stages separated by '|': "E + 3t | 2t"; "-" for an empty one.
  std::string summary(int pp_rank) const {
    std::string out;
    for (int v = 0; v < vpp; ++v) {
      if (v > 0) out += " | ";
      const auto& layers = at(pp_rank, v);
      if (layers.empty()) out += "-";
      for (std::size_t k = 0; k < layers.size();) {  // runs of one type: "3t"
        std::size_t run = 1;
        while (k + run < layers.size() && layers[k + run] == layers[k]) ++run;
        if (k > 0) out += " + ";
        if (run > 1) out += std::to_string(run);
        out += layer_char(layers[k]);
        k += run;
      }
    }
    return out;
  }

 private:
  static int count_in(const std::vector<LayerType>& layers, LayerType type) {
    int n = 0;
    for (LayerType t : layers) n += (t == type);
    return n;
  }
};

/// Parses `text` for a pipeline of `pp` ranks and a model of `num_layers` decoder layers, and
/// checks it (see the top of this file). Throws PipelineLayoutError naming what is wrong.
inline LayerLayout parse_layout(std::string_view text, int pp, int num_layers) {
  using detail::cat;
  const auto fail = [&](const std::string& what) {
    throw PipelineLayoutError(cat("pipeline layout \"", text, "\": ", what));
  };
  if (pp < 1) fail(cat("pipeline-parallel size ", pp, "; need >= 1"));
  if (num_layers < 0) fail(cat("the model has ", num_layers, " decoder layers; need >= 0"));
  LayerLayout out{std::string(text), pp, 0, parse_layout_stages(text)};
  const int n_stages = static_cast<int>(out.stages.size());
  if (n_stages % pp != 0) fail(cat(n_stages, " stages are not divisible by pipeline-parallel size ", pp));
  out.vpp = n_stages / pp;

  // Exactly one E, the first layer of stage 0; exactly one L, the last layer of the last stage.
  struct Place {
    int count = 0, stage = -1, index = -1;  // how many, and where the first one is
  };
  auto find = [&](LayerType type) {
    Place at;
    for (int s = 0; s < n_stages; ++s)
      for (int k = 0; k < static_cast<int>(out.stages[s].size()); ++k)
        if (out.stages[s][k] == type && at.count++ == 0) {
          at.stage = s;
          at.index = k;
        }
    return at;
  };
  const Place e = find(LayerType::embedding);
  if (e.count == 0) fail("no embedding 'E'; the first stage must start with it");
  if (e.count > 1) fail(cat(e.count, " embeddings 'E'; need exactly one"));
  if (e.stage != 0 || e.index != 0)
    fail(cat("the embedding 'E' is layer ", e.index, " of stage ", e.stage,
             "; it must be the first layer of the first stage"));
  const Place l = find(LayerType::loss);
  const int last = n_stages - 1;
  if (l.count == 0) fail("no loss 'L'; the last stage must end with it");
  if (l.count > 1) fail(cat(l.count, " losses 'L'; need exactly one"));
  if (l.stage != last || l.index != static_cast<int>(out.stages[last].size()) - 1)
    fail(cat("the loss 'L' is layer ", l.index, " of stage ", l.stage, "; it must be the last layer of the last stage (",
             last, ")"));
  const int decoders = out.count(LayerType::decoder);
  if (decoders != num_layers) fail(cat(decoders, " decoder layers 't', the model has ", num_layers));
  return out;
}

/// Throws PipelineLayoutError when the layout asks for a layer shardalg cannot build: the
/// multi-token-prediction head 'm' (parsed and placed, but there is no MTP module here).
inline void check_buildable(const LayerLayout& layout) {
  for (std::size_t s = 0; s < layout.stages.size(); ++s)
    for (LayerType t : layout.stages[s])
      if (t == LayerType::mtp)
        throw PipelineLayoutError(detail::cat(
            "pipeline layout \"", layout.text, "\": stage ", s, " (pp rank ", static_cast<int>(s) % layout.pp,
            ", vp stage ", static_cast<int>(s) / layout.pp,
            ") has a multi-token-prediction layer 'm'; shardalg has no MTP head to build"));
}

}  // namespace shardalg::pipeline
