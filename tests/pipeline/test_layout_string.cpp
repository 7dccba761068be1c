// Megatron-LM's pipeline_model_parallel_layout strings (shardalg/pipeline/stage_assignment.hpp):
// the two golden layouts of issue 16, the offsets against Megatron-LM's own formula
// (get_layer_offset, written out independently below), the repeat grammar, and every error text.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <shardalg/pipeline/stage_assignment.hpp>

using namespace shardalg::pipeline;

namespace {

using Stage = std::vector<LayerType>;
constexpr LayerType E = LayerType::embedding, t = LayerType::decoder, m = LayerType::mtp, L = LayerType::loss;

/// Megatron-LM's get_layer_offset, as the seed document writes it: the `type` layers of every
/// pp rank in the vp stages before, and of the pp ranks before in this vp stage.
int megatron_offset(const LayerLayout& lay, LayerType type, int pp_rank, int vp_stage) {
  int offset = 0;
  for (int v = 0; v <= vp_stage; ++v)
    for (int r = 0; r < (v < vp_stage ? lay.pp : pp_rank); ++r) offset += lay.num_layers_to_build(type, r, v);
  return offset;
}

}  // namespace

TEST_CASE("layout: DeepSeek-V3 \"Et*3|(tt|)*29,m|L\" at PP = 16 is VPP = 2, as the table in the seed") {
  const LayerLayout lay = parse_layout("Et*3|(tt|)*29,m|L", 16, 61);
  CHECK(lay.pp == 16);
  CHECK(lay.vpp == 2);
  CHECK(lay.stages.size() == 32);
  CHECK(lay.summary(0) == "E + 3t | 2t");
  for (int r = 1; r <= 13; ++r) {
    CAPTURE(r);
    CHECK(lay.summary(r) == "2t | 2t");
  }
  CHECK(lay.summary(14) == "2t | m");
  CHECK(lay.summary(15) == "2t | L");
  CHECK(lay.at(14, 1) == Stage{m});
  CHECK(lay.at(0, 0) == Stage{E, t, t, t});
  CHECK(lay.count(LayerType::decoder) == 61);
  CHECK(lay.count(LayerType::mtp) == 1);
  // Decoder ids (0-based): stage 0 holds 0, 1, 2; stage i = 1 … 29 holds 3 + 2(i − 1) and the
  // next; stage i lives on (pp i mod 16, vpp i div 16).
  CHECK(lay.layer_ids(t, 0, 0) == std::vector<int>{0, 1, 2});
  for (int i = 1; i <= 29; ++i) {
    CAPTURE(i);
    const int first = 3 + 2 * (i - 1);
    CHECK(lay.layer_ids(t, i % 16, i / 16) == std::vector<int>{first, first + 1});
  }
  CHECK(lay.layer_ids(t, 14, 1).empty());
  CHECK(lay.layer_ids(t, 15, 1).empty());
  CHECK(lay.layer_offset(t, 15, 1) == 61);
  // The offsets agree with Megatron-LM's double loop for every type and place.
  for (LayerType type : {E, t, m, L})
    for (int v = 0; v < 2; ++v)
      for (int r = 0; r < 16; ++r) CHECK(lay.layer_offset(type, r, v) == megatron_offset(lay, type, r, v));
  // The library builds no multi-token-prediction head: a consumer asking for one is refused.
  CHECK_THROWS_WITH_AS(check_buildable(lay),
                       "pipeline layout \"Et*3|(tt|)*29,m|L\": stage 30 (pp rank 14, vp stage 1) has a "
                       "multi-token-prediction layer 'm'; shardalg has no MTP head to build",
                       PipelineLayoutError);
}

TEST_CASE("layout: \"E|t|t*2|t||(t|)*2,t*2,L\" at PP = 4: stages, and layer ids per (pp, vpp)") {
  const LayerLayout lay = parse_layout("E|t|t*2|t||(t|)*2,t*2,L", 4, 8);
  const std::vector<Stage> stages = {{E}, {t}, {t, t}, {t}, {}, {t}, {t}, {t, t, L}};
  CHECK(lay.stages == stages);
  CHECK(lay.vpp == 2);
  // The issue counts decoder layers from 1 as written; the library counts from 0 (as
  // Megatron-LM's get_layer_id_list): expected[pp][vpp] below is 1-based, so compare ids + 1.
  const std::vector<std::vector<std::vector<int>>> expected = {
      {{}, {}}, {{1}, {5}}, {{2, 3}, {6}}, {{4}, {7, 8}}};
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < 2; ++v) {
      CAPTURE(r);
      CAPTURE(v);
      std::vector<int> ids = lay.layer_ids(t, r, v);
      for (int& id : ids) ++id;
      CHECK(ids == expected[r][v]);
      CHECK(lay.layer_offset(t, r, v) == megatron_offset(lay, t, r, v));
    }
  CHECK(lay.summary(0) == "E | -");
  CHECK(lay.summary(3) == "t | 2t + L");
  CHECK_NOTHROW(check_buildable(lay));
}

TEST_CASE("layout: the repeat grammar (a superset of Megatron-LM's)") {
  // x*n and (…)*n; commas dropped; '|' repeats like any character; groups nest; a group without
  // a count is its contents.
  CHECK(parse_layout_stages("Et*3|L") == std::vector<Stage>{{E, t, t, t}, {L}});
  CHECK(parse_layout_stages("E,t,t|t,L") == std::vector<Stage>{{E, t, t}, {t, L}});
  CHECK(parse_layout_stages("E|*3L") == std::vector<Stage>{{E}, {}, {}, {L}});
  CHECK(parse_layout_stages("E(t(t)*2)*2|L") == std::vector<Stage>{{E, t, t, t, t, t, t}, {L}});
  CHECK(parse_layout_stages("(E)(tt)|L") == std::vector<Stage>{{E, t, t}, {L}});
  CHECK(parse_layout_stages("Et*0|L") == std::vector<Stage>{{E}, {L}});
  CHECK(parse_layout_stages("") == std::vector<Stage>{{}});
  CHECK(parse_layout("EtL", 1, 1).summary(0) == "E + t + L");
}

TEST_CASE("layout: errors are PipelineLayoutError naming the values") {
  const char* pre = "pipeline layout ";
  auto msg = [&](const std::string& text, const std::string& what) { return pre + ("\"" + text + "\": " + what); };
  // Characters and parentheses; positions are in the string as written (commas counted).
  CHECK_THROWS_WITH_AS(parse_layout("Ex|L", 1, 0),
                       msg("Ex|L", "unknown character 'x' at position 1 (a layout has E, t, m, L, '|', '(', ')', "
                                   "'*' with a count, and commas)")
                           .c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("E,t, t|L", 1, 2),
                       msg("E,t, t|L", "unknown character ' ' at position 4 (a layout has E, t, m, L, '|', '(', "
                                       "')', '*' with a count, and commas)")
                           .c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("E(tt|L", 1, 2), msg("E(tt|L", "'(' at position 1 is never closed").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Ett)|L", 1, 2),
                       msg("Ett)|L", "')' at position 3 has no matching '('").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et*|L", 1, 1), msg("Et*|L", "'*' at position 2 needs a repeat count").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("*2Et|L", 1, 1),
                       msg("*2Et|L", "'*' at position 0 has nothing to repeat").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et*2*3|L", 1, 6),  // a repeat is not repeated again
                       msg("Et*2*3|L", "'*' at position 4 has nothing to repeat").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("E(*2t)|L", 1, 1),
                       msg("E(*2t)|L", "'*' at position 2 has nothing to repeat").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("E2t|L", 1, 1),
                       msg("E2t|L", "digit '2' at position 1 is not a repeat count (a count follows '*')").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et*123456789|L", 1, 1),
                       msg("Et*123456789|L", "the repeat count after '*' at position 2 is too large").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("E(t*1000)*1001|L", 1, 1),
                       msg("E(t*1000)*1001|L", "expands to more than 1000000 layers").c_str(), PipelineLayoutError);
  // E first, L last, exactly once each.
  CHECK_THROWS_WITH_AS(parse_layout("tt|L", 1, 2),
                       msg("tt|L", "no embedding 'E'; the first stage must start with it").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et|EL", 2, 1), msg("Et|EL", "2 embeddings 'E'; need exactly one").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("tE|tL", 2, 2),
                       msg("tE|tL", "the embedding 'E' is layer 1 of stage 0; it must be the first layer of the "
                                    "first stage")
                           .c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et|t", 2, 2),
                       msg("Et|t", "no loss 'L'; the last stage must end with it").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("EtL|tL", 2, 2), msg("EtL|tL", "2 losses 'L'; need exactly one").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et|Lt", 2, 2),
                       msg("Et|Lt", "the loss 'L' is layer 0 of stage 1; it must be the last layer of the last "
                                    "stage (1)")
                           .c_str(),
                       PipelineLayoutError);
  // The model's layer count, and the stages against PP.
  CHECK_THROWS_WITH_AS(parse_layout("Et*3|(tt|)*29,m|L", 16, 60),
                       msg("Et*3|(tt|)*29,m|L", "61 decoder layers 't', the model has 60").c_str(), PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("Et*3|(tt|)*29,m|L", 6, 61),
                       msg("Et*3|(tt|)*29,m|L", "32 stages are not divisible by pipeline-parallel size 6").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("EtL", 0, 1), msg("EtL", "pipeline-parallel size 0; need >= 1").c_str(),
                       PipelineLayoutError);
  CHECK_THROWS_WITH_AS(parse_layout("EtL", 1, -1), msg("EtL", "the model has -1 decoder layers; need >= 0").c_str(),
                       PipelineLayoutError);
  // A place outside the layout.
  const LayerLayout lay = parse_layout("Et|tL", 2, 2);
  CHECK_THROWS_WITH_AS(lay.at(2, 0), msg("Et|tL", "(pp rank 2, vp stage 0) is outside pp = 2, vpp = 1").c_str(),
                       PipelineLayoutError);
  // All of them are PipelineError and shardalg::Error.
  CHECK_THROWS_AS(parse_layout("Ex", 1, 0), PipelineError);
  CHECK_THROWS_AS(parse_layout("Ex", 1, 0), shardalg::Error);
}
