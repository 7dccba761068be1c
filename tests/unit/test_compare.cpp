// Another framework's run from its tensors: the safetensors reader and writer (bytes built by hand,
// every bad input's text), the layout map (its errors, the presets on the frameworks' own names),
// and compare_dumps' rules, each on shards cut by hand from a reference and then broken the way
// its bug breaks them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "shardalg/verify/compare.hpp"

using namespace shardalg::verify;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("shardalg_compare_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

/// A file of: the u64 header length, the header text, the data bytes.
fs::path raw_file(const std::string& name, const std::string& header, const std::vector<unsigned char>& data,
                  std::optional<std::uint64_t> claimed = std::nullopt) {
  const fs::path p = temp_dir() / name;
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t n = claimed.value_or(header.size());
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return p;
}

std::string read_error(const fs::path& p) {
  try {
    SafetensorsFile f(p);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- in-memory dumps for compare_dumps --------------------------------------------------------

using Tensors = std::vector<std::pair<std::string, DenseTensor>>;

Dump memory_dump(const Tensors& ts, double tol = 1e-12) {
  Dump d;
  d.tol = tol;
  for (const auto& t : ts) d.names.push_back(t.first);
  d.get = [ts](const std::string& name) -> std::optional<DenseTensor> {
    for (const auto& t : ts)
      if (t.first == name) return t.second;
    return std::nullopt;
  };
  return d;
}

DenseTensor random_tensor(std::vector<std::int64_t> shape, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  DenseTensor t{shape, {}};
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  for (std::int64_t i = 0; i < n; ++i) t.v.push_back(u(g));
  return t;
}

/// Rows [lo, hi) of a 2-D tensor, cut by hand.
DenseTensor rows(const DenseTensor& t, std::int64_t lo, std::int64_t hi) {
  const std::int64_t c = t.shape[1];
  return {{hi - lo, c}, std::vector<double>(t.v.begin() + lo * c, t.v.begin() + hi * c)};
}
/// Columns [lo, hi) of a 2-D tensor.
DenseTensor cols(const DenseTensor& t, std::int64_t lo, std::int64_t hi) {
  DenseTensor o{{t.shape[0], hi - lo}, {}};
  for (std::int64_t r = 0; r < t.shape[0]; ++r)
    for (std::int64_t c = lo; c < hi; ++c) o.v.push_back(t.v[r * t.shape[1] + c]);
  return o;
}
DenseTensor scaled(DenseTensor t, double s) {
  for (auto& x : t.v) x *= s;
  return t;
}

LayoutMap map_of(const std::string& json) { return parse_layout_map(json, "test"); }

std::vector<std::string> codes(const TensorReport& t) {
  std::vector<std::string> c;
  for (const auto& d : t.diagnoses) c.push_back(d.code);
  return c;
}

}  // namespace

TEST_CASE("safetensors: a file built by hand reads back, every dtype, in data order, with its metadata") {
  // y (F32 [2]) is written first in the data although the header names x first.
  std::vector<unsigned char> data;
  auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    data.insert(data.end(), b, b + n);
  };
  const float y[2] = {1.5f, -2.25f};
  put(y, 8);
  const double x[3] = {0.1, 1e300, -0.0};
  put(x, 24);
  const std::uint16_t bf[2] = {0x3f80, 0xc040};  // 1, -3 in bfloat16
  put(bf, 4);
  const std::uint16_t hf[2] = {0x3c00, 0x3555};  // 1, 0.333251953125 in half
  put(hf, 4);
  const std::int64_t i64[1] = {-(std::int64_t{1} << 40)};
  put(i64, 8);
  const std::int32_t i32[2] = {7, -9};
  put(i32, 8);
  const std::string header =
      R"({"x":{"dtype":"F64","shape":[3],"data_offsets":[8,32]},"y":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]},"h":{"dtype":"F16","shape":[1,2],"data_offsets":[36,40]},)"
      R"("l":{"dtype":"I64","shape":[],"data_offsets":[40,48]},"i":{"dtype":"I32","shape":[2],"data_offsets":[48,56]},)"
      R"("__metadata__":{"format":"pt"}})";
  SafetensorsFile f(raw_file("hand.safetensors", header, data));
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"y", "x", "b", "h", "l", "i"});
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.at("y").to_double() == std::vector<double>{1.5, -2.25});
  CHECK(f.at("y").shape == std::vector<std::int64_t>{2, 1});
  CHECK(f.at("x").to_double() == std::vector<double>{0.1, 1e300, -0.0});
  CHECK(f.at("b").to_double() == std::vector<double>{1.0, -3.0});
  CHECK(f.at("h").to_double() == std::vector<double>{1.0, 0.333251953125});
  CHECK(f.at("l").to_double() == std::vector<double>{-1099511627776.0});
  CHECK(f.at("l").numel() == 1);
  CHECK(f.at("i").to_double() == std::vector<double>{7.0, -9.0});
  CHECK(f.find("z") == nullptr);
  CHECK_THROWS_WITH_AS(f.at("z"), ("safetensors: " + (temp_dir() / "hand.safetensors").string() + ": has no tensor 'z'").c_str(),
                       SafetensorsError);
}

TEST_CASE("safetensors: the writer's bytes, its rounding, and a round trip of every dtype") {
  const fs::path p = temp_dir() / "w.safetensors";
  write_safetensors(p, {{"a", StDtype::F32, {2}, {1.0, -0.5}}}, {{"format", "pt"}});
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::size_t padded = header.size() + (8 - (8 + header.size()) % 8) % 8;
  REQUIRE(bytes.size() == 8 + padded + 8);
  CHECK(static_cast<unsigned char>(bytes[0]) == padded);
  CHECK(bytes.substr(8, header.size()) == header);
  CHECK(bytes.substr(8 + header.size(), padded - header.size()) == std::string(padded - header.size(), ' '));
  CHECK((8 + padded) % 8 == 0);
  const unsigned char data[8] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xbf};  // 1.0f, -0.5f little-endian
  CHECK(std::memcmp(bytes.data() + 8 + padded, data, 8) == 0);

  // Round to nearest even: 1 + 2^-8 is halfway between two bfloat16 values (1 and 1 + 2^-7): → 1;
  // 1 + 3·2^-9 is above the half: → 1 + 2^-7. Half: 1 + 2^-11 → 1, 1 + 3·2^-12 → 1 + 2^-10.
  write_safetensors(p, {{"b", StDtype::BF16, {2}, {1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -9)}},
                        {"h", StDtype::F16, {2}, {1 + std::ldexp(1.0, -11), 1 + 3 * std::ldexp(1.0, -12)}},
                        {"d", StDtype::F64, {1, 1}, {0.1}},
                        {"l", StDtype::I64, {}, {-3}},
                        {"i", StDtype::I32, {3}, {1, 2, 3}}});
  SafetensorsFile f(p);
  CHECK(f.at("b").to_double() == std::vector<double>{1.0, 1 + std::ldexp(1.0, -7)});
  CHECK(f.at("h").to_double() == std::vector<double>{1.0, 1 + std::ldexp(1.0, -10)});
  CHECK(f.at("d").to_double() == std::vector<double>{0.1});
  CHECK(f.at("l").to_double() == std::vector<double>{-3.0});
  CHECK(f.at("i").to_double() == std::vector<double>{1, 2, 3});
  CHECK(f.tensors().front().name == "b");  // the order written
  CHECK(f.metadata().empty());
}

TEST_CASE("safetensors: every bad file is refused with a text that names it and what is wrong") {
  const std::string d = temp_dir().string() + "/";
  CHECK(read_error(temp_dir() / "none.safetensors") == "safetensors: " + d + "none.safetensors: cannot open: No such file or directory");
  {
    const fs::path p = temp_dir() / "short.safetensors";
    std::ofstream(p) << "abcde";
    CHECK(read_error(p) == "safetensors: " + d + "short.safetensors: 5 bytes, shorter than the 8-byte header length (truncated?)");
  }
  CHECK(read_error(raw_file("long.st", "{}", {}, 200)) == "safetensors: " + d + "long.st: header of 200 bytes runs past the end of the file (10 bytes: truncated?)");
  CHECK(read_error(raw_file("huge.st", "{}", {}, 1ull << 40)) ==
        "safetensors: " + d + "huge.st: header length 1099511627776 is more than 100000000 bytes (not a safetensors file?)");
  CHECK(read_error(raw_file("json.st", R"({"a": [1, )", {})) == "safetensors: " + d + "json.st: the header is not valid JSON (at byte 10 of 10)");
  CHECK(read_error(raw_file("arr.st", "[1]", {})) == "safetensors: " + d + "arr.st: the header is not a JSON object");
  const std::vector<unsigned char> eight(8, 0);
  CHECK(read_error(raw_file("u8.st", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight)) ==
        "safetensors: " + d + "u8.st: tensor 'a': dtype U8 is not read (F64, F32, BF16, F16, I64, I32)");
  CHECK(read_error(raw_file("noshape.st", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight)) ==
        "safetensors: " + d + "noshape.st: tensor 'a': no 'shape'");
  CHECK(read_error(raw_file("negshape.st", R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", eight)) ==
        "safetensors: " + d + "negshape.st: tensor 'a': 'shape' [2,-1] is not a list of non-negative integers");
  CHECK(read_error(raw_file("backw.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight)) ==
        "safetensors: " + d + "backw.st: tensor 'a': 'data_offsets' [8,0] is not [begin, end] with begin ≤ end");
  CHECK(read_error(raw_file("past.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight)) ==
        "safetensors: " + d + "past.st: tensor 'a': data_offsets [0, 16] run past the end of the data (8 bytes: truncated?)");
  CHECK(read_error(raw_file("size.st", R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", eight)) ==
        "safetensors: " + d + "size.st: tensor 'a': data_offsets [0, 8] hold 8 bytes; shape [2] of F64 needs 16");
  CHECK(read_error(raw_file("ovf.st", R"({"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", eight)) ==
        "safetensors: " + d + "ovf.st: tensor 'a': data_offsets [0, 8] hold 8 bytes; shape [4611686018427387904, 4] of F64 overflows 64-bit sizes");
  CHECK(read_error(raw_file("overlap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight)) ==
        "safetensors: " + d + "overlap.st: tensors 'a' and 'b' overlap (bytes 4..8)");
  CHECK(read_error(raw_file("gap.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight)) ==
        "safetensors: " + d + "gap.st: bytes 0..4 of the data belong to no tensor");
  CHECK(read_error(raw_file("tail.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight)) ==
        "safetensors: " + d + "tail.st: bytes 4..8 of the data belong to no tensor");
  CHECK(read_error(raw_file("meta.st", R"({"__metadata__":{"format":1}})", {})) == "safetensors: " + d + "meta.st: __metadata__ 'format' is not a string");
  CHECK(read_error(raw_file("empty.st", "{}", {})) == "(no error)");  // no tensors is a valid file

  // The writer: wrong value counts, a name twice, and a directory that does not exist (nothing left behind).
  CHECK_THROWS_WITH_AS(write_safetensors(temp_dir() / "bad.st", {{"a", StDtype::F32, {2, 2}, {1, 2, 3}}}),
                       ("safetensors: " + d + "bad.st: tensor 'a': shape [2, 2] has 4 elements, 3 values given").c_str(), SafetensorsError);
  CHECK_THROWS_WITH_AS(write_safetensors(temp_dir() / "bad.st", {{"a", StDtype::F32, {1}, {1}}, {"a", StDtype::F32, {1}, {2}}}),
                       ("safetensors: " + d + "bad.st: tensor name 'a' is empty, reserved or given twice").c_str(), SafetensorsError);
  CHECK_THROWS_WITH_AS(write_safetensors("/nonexistent-shardalg-dir/x.st", {{"a", StDtype::F32, {1}, {1}}}),
                       "safetensors: /nonexistent-shardalg-dir/x.st: cannot create a file in /nonexistent-shardalg-dir: No such file or directory",
                       SafetensorsError);
  CHECK_FALSE(fs::exists(temp_dir() / "bad.st"));
  // Replacing a file is atomic: the old content until the rename, no temporary left after it.
  const fs::path p = temp_dir() / "replace.st";
  write_safetensors(p, {{"a", StDtype::F32, {1}, {1}}});
  write_safetensors(p, {{"b", StDtype::F64, {1}, {2}}});
  CHECK(SafetensorsFile(p).at("b").to_double() == std::vector<double>{2});
  for (const auto& e : fs::directory_iterator(temp_dir())) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("layout map: the format's errors name the map and the key; the presets on the frameworks' names") {
  auto err = [](const std::string& j) {
    try {
      map_of(j);
    } catch (const LayoutMapError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("{") == "layout map test: not valid JSON (at byte 1 of 1)");
  CHECK(err(R"({"rules": []})") == R"(layout map test: 'mesh' must be an object of axis sizes, e.g. {"tp": 4})");
  CHECK(err(R"({"mesh": {"tp": 0}, "preset": "megatron"})") == "layout map test: mesh axis 'tp' is 0, not a size from 1 to 65536");
  CHECK(err(R"({"mesh": {"tp": 2}, "rule": []})") == "layout map test: unknown key 'rule' (mesh, rules, preset, grad_suffix)");
  CHECK(err(R"({"mesh": {"tp": 2}})") == "layout map test: no 'rules' and no 'preset'");
  CHECK(err(R"({"mesh": {"tp": 2}, "rules": [{"match": "*", "layout": {"dp": "R"}}]})") == "layout map test: rule 0: axis 'dp' is not in the mesh");
  CHECK(err(R"({"mesh": {"tp": 2}, "rules": [{"match": "*", "layout": {"tp": "Col"}}]})") ==
        "layout map test: rule 0: layout 'Col' is not one of R, I, Row, C, Shard(d), Partial, Partial->R");
  CHECK(err(R"({"mesh": {"tp": 2}, "preset": "deepspeed"})") == "layout map test: preset 'deepspeed' is not one of megatron, megatron-sp, torch-tp");
  CHECK(err(R"({"mesh": {"dp": 2}, "preset": "megatron"})") == "layout map test: preset 'megatron' names the axis 'tp', which the mesh lacks");
  CHECK(parse_axis_layout("Row") == AxisLayout{AxisLayout::Shard, 0});
  CHECK(parse_axis_layout("C") == AxisLayout{AxisLayout::Shard, -1});
  CHECK(parse_axis_layout("Shard(-2)") == AxisLayout{AxisLayout::Shard, -2});
  CHECK(parse_axis_layout("Partial\u2192R") == AxisLayout{AxisLayout::PartialToR, 0});
  CHECK_THROWS_AS(parse_axis_layout("Shard(1x)"), LayoutMapError);
  CHECK(glob_match("*.linear_fc1.weight", "decoder.layers.11.mlp.linear_fc1.weight"));
  CHECK_FALSE(glob_match("*.linear_fc1.weight", "decoder.layers.11.mlp.linear_fc1.weight.grad"));
  CHECK(glob_match("a*b*c", "aXbYbZc"));
  CHECK_FALSE(glob_match("a*b*c", "aXbYbZ"));

  // Megatron-Core's GPT names (its gpt_layer_specs / state dict) and PyTorch's TP tutorial (Llama).
  const auto mg = map_of(R"({"mesh": {"tp": 8}, "preset": "megatron"})");
  const auto sp = map_of(R"({"mesh": {"tp": 8}, "preset": "megatron-sp"})");
  const auto pt = map_of(R"({"mesh": {"tp": 8}, "preset": "torch-tp"})");
  auto on = [](const LayoutMap& m, const std::string& n) { return layout_text(m.layout_of(n)[0]); };
  CHECK(on(mg, "decoder.layers.3.self_attention.linear_qkv.weight") == "Shard(0)");
  CHECK(on(mg, "decoder.layers.3.self_attention.linear_qkv.bias.grad") == "Shard(0)");
  CHECK(on(mg, "decoder.layers.3.self_attention.linear_proj.weight") == "Shard(-1)");
  CHECK(on(mg, "decoder.layers.3.self_attention.linear_proj.bias") == "R");
  CHECK(on(mg, "decoder.layers.3.mlp.linear_fc1.weight.grad") == "Shard(0)");
  CHECK(on(mg, "decoder.layers.3.mlp.linear_fc2.weight") == "Shard(-1)");
  CHECK(on(mg, "decoder.layers.3.input_layernorm.weight.grad") == "R");
  CHECK(on(sp, "decoder.layers.3.input_layernorm.weight.grad") == "Partial->R");
  CHECK(on(sp, "decoder.layers.3.mlp.linear_fc2.bias.grad") == "Partial->R");
  CHECK(on(sp, "decoder.layers.3.pre_mlp_layernorm.output") == "Shard(0)");
  CHECK(on(mg, "decoder.layers.3.pre_mlp_layernorm.output") == "R");
  CHECK(on(sp, "decoder.final_layernorm.bias.grad") == "Partial->R");
  CHECK(on(mg, "embedding.word_embeddings.weight") == "Shard(0)");
  CHECK(on(mg, "output_layer.weight") == "Shard(0)");
  CHECK(on(mg, "loss") == "R");
  CHECK(on(pt, "layers.0.attention.wq.weight") == "Shard(0)");
  CHECK(on(pt, "layers.0.attention.wo.weight") == "Shard(-1)");
  CHECK(on(pt, "layers.0.feed_forward.w3.weight.grad") == "Shard(0)");
  CHECK(on(pt, "layers.0.feed_forward.w2.weight") == "Shard(-1)");
  CHECK(on(pt, "layers.0.attention_norm.weight") == "R");
  CHECK(on(pt, "tok_embeddings.weight") == "Shard(0)");
  CHECK(on(pt, "output.weight") == "Shard(0)");
  CHECK_THROWS_WITH_AS(mg.layout_of("decoder.layers.3.mlp.router.weight"),
                       "no rule of the layout map matches tensor 'decoder.layers.3.mlp.router.weight'", LayoutMapError);
  // Rules come before the preset; an axis a rule does not name is R; ranks are row-major.
  const auto m2 = map_of(R"({"mesh": {"dp": 2, "tp": 3}, "rules": [{"match": "x", "layout": {"tp": "C"}}], "preset": "megatron"})");
  CHECK(m2.layout_text_of("x") == "dp:R, tp:Shard(-1)");
  CHECK(m2.layout_text_of("decoder.layers.0.mlp.linear_fc1.weight") == "dp:R, tp:Shard(0)");
  CHECK(m2.ranks() == 6);
  CHECK(m2.coords(4) == std::vector<int>{1, 1});
}

TEST_CASE("compare_dumps: a correct sharded run passes, uneven blocks and a dp × tp mesh included") {
  // tp = 3 over 7 rows (blocks 3, 2, 2) and 5 columns (2, 2, 1); a Partial; an R; a gradient.
  const auto w = random_tensor({7, 5}, 1), h = random_tensor({4, 5}, 2), s = random_tensor({4, 5}, 3), b = random_tensor({5}, 4);
  const Dump ref = memory_dump({{"w.grad", w}, {"w", w}, {"h", h}, {"s", s}, {"b", b}});
  const auto map = map_of(R"({"mesh": {"tp": 3}, "rules": [{"match": "w*", "layout": {"tp": "Row"}}, {"match": "h", "layout": {"tp": "C"}},
                                {"match": "s", "layout": {"tp": "Partial"}}, {"match": "b", "layout": {"tp": "R"}}]})");
  const std::int64_t r0[4] = {0, 3, 5, 7}, c0[4] = {0, 2, 4, 5};
  std::vector<Dump> ranks;
  for (int k = 0; k < 3; ++k) {
    DenseTensor part = scaled(s, k == 0 ? 0.5 : 0.25);  // 0.5 + 0.25 + 0.25 = 1
    ranks.push_back(memory_dump({{"w", rows(w, r0[k], r0[k + 1])}, {"h", cols(h, c0[k], c0[k + 1])}, {"s", part}, {"b", b},
                                 {"w.grad", rows(w, r0[k], r0[k + 1])}}));
  }
  const auto rep = compare_dumps(map, ranks, ref);
  CHECK(rep.pass);
  REQUIRE(rep.tensors.size() == 5);
  CHECK(rep.tensors[0].name == "w");  // forward first, the gradient after it
  CHECK(rep.tensors[4].name == "w.grad");
  CHECK(rep.tensors[4].backward);
  CHECK(rep.tensors[0].rel_error == 0);
  CHECK(rep.tensors[2].rel_error < 1e-15);

  // dp × tp = 2 × 2: X[dp:Row, tp:C], and its gradient's copies over dp unreduced (Partial left on dp).
  const auto x = random_tensor({4, 6}, 5);
  const auto m2 = map_of(R"({"mesh": {"dp": 2, "tp": 2}, "rules": [{"match": "x*", "layout": {"dp": "Row", "tp": "C"}}, {"match": "g", "layout": {"tp": "C"}}]})");
  const Dump r2 = memory_dump({{"x", x}, {"g", x}});
  std::vector<Dump> ok, bad;
  for (int rank = 0; rank < 4; ++rank) {
    const int dp = rank / 2, tp = rank % 2;
    const auto blk = cols(rows(x, 2 * dp, 2 * dp + 2), 3 * tp, 3 * tp + 3);
    ok.push_back(memory_dump({{"x", blk}, {"g", cols(x, 3 * tp, 3 * tp + 3)}}));
    bad.push_back(memory_dump({{"x", blk}, {"g", scaled(cols(x, 3 * tp, 3 * tp + 3), dp == 0 ? 0.75 : 0.25)}}));
  }
  CHECK(compare_dumps(m2, ok, r2).pass);
  const auto rb = compare_dumps(m2, bad, r2);
  CHECK_FALSE(rb.pass);
  CHECK(rb.tensors[0].pass);
  CHECK(codes(rb.tensors[1]) == std::vector<std::string>{"partial-not-reduced"});
  CHECK(rb.tensors[1].diagnoses[0].text.starts_with("a Partial never reduced over dp:"));
  CHECK(*rb.first_divergence == 1);
  // One element off by 1e-9 of its size fails at tolerance 1e-12: the check can fail.
  std::vector<Dump> off = ok;
  off[3] = memory_dump({{"x", [&] { auto t = cols(rows(x, 2, 4), 3, 6); t.v[5] *= 1 + 1e-9; return t; }()}, {"g", cols(x, 3, 6)}});
  CHECK_FALSE(compare_dumps(m2, off, r2).pass);
}

TEST_CASE("compare_dumps: each bug is named by its rule") {
  const auto x = random_tensor({6, 4}, 7), bias = random_tensor({4}, 8);
  const auto map = map_of(R"({"mesh": {"tp": 2}, "rules": [{"match": "m.output", "layout": {"tp": "R"}}, {"match": "m.bias", "layout": {"tp": "R"}},
                              {"match": "r*", "layout": {"tp": "R"}}, {"match": "s*", "layout": {"tp": "Row"}}]})");
  const auto map3 = map_of(R"({"mesh": {"tp": 3}, "rules": [{"match": "*", "layout": {"tp": "R"}}]})");
  const Dump ref = memory_dump({{"m.output", x}, {"m.bias", bias}});
  auto one = [&](const LayoutMap& m, const std::vector<Tensors>& parts, const std::string& name, const DenseTensor& r) {
    std::vector<Dump> ds;
    for (const auto& p : parts) ds.push_back(memory_dump(p));
    const auto rep = compare_dumps(m, ds, memory_dump({{name, r}}));
    REQUIRE(rep.tensors.size() == 1);
    return rep.tensors[0];
  };
  SUBCASE("partial-not-reduced: R declared, the copies differ and sum to the reference") {
    const auto t = one(map, {{{"r", scaled(x, 0.3)}}, {{"r", scaled(x, 0.7)}}}, "r", x);
    CHECK(codes(t) == std::vector<std::string>{"partial-not-reduced"});
  }
  SUBCASE("rank-differs: one rank of three alone") {
    auto t = one(map3, {{{"r", x}}, {{"r", x}}, {{"r", scaled(x, 1.1)}}}, "r", x);
    CHECK(codes(t) == std::vector<std::string>{"rank-differs"});
    CHECK(t.diagnoses[0].text.starts_with("rank 2 of axis tp alone differs"));
    t = one(map3, {{{"r", scaled(x, 1.1)}}, {{"r", x}}, {{"r", x}}}, "r", x);
    CHECK(t.diagnoses[0].text.starts_with("rank 0 of axis tp alone differs"));
  }
  SUBCASE("replicas-disagree: no simple story") {
    const auto t = one(map3, {{{"r", x}}, {{"r", random_tensor({6, 4}, 9)}}, {{"r", random_tensor({6, 4}, 10)}}}, "r", x);
    CHECK(codes(t).front() == "replicas-disagree");
  }
  SUBCASE("reduced-twice, scaled-down, scaled") {
    CHECK(codes(one(map, {{{"r", scaled(x, 2)}}, {{"r", scaled(x, 2)}}}, "r", x)) == std::vector<std::string>{"reduced-twice"});
    CHECK(codes(one(map, {{{"r", scaled(x, 0.5)}}, {{"r", scaled(x, 0.5)}}}, "r", x)) == std::vector<std::string>{"scaled-down"});
    CHECK(codes(one(map, {{{"r", scaled(x, 1.5)}}, {{"r", scaled(x, 1.5)}}}, "r", x)) == std::vector<std::string>{"scaled"});
  }
  SUBCASE("bias-before-reduce: every row off by (tp − 1) × the module's bias") {
    DenseTensor y = x;
    for (std::size_t i = 0; i < y.v.size(); ++i) y.v[i] += bias.v[i % 4];
    std::vector<Dump> ds{memory_dump({{"m.output", y}, {"m.bias", bias}}), memory_dump({{"m.output", y}, {"m.bias", bias}})};
    const auto rep = compare_dumps(map, ds, ref);
    CHECK(codes(rep.tensors[0]) == std::vector<std::string>{"bias-before-reduce"});
    CHECK(rep.tensors[0].diagnoses[0].text.find("(2 − 1) × 'm.bias', the bias added on every rank of tp before the all_reduce") != std::string::npos);
    CHECK(rep.tensors[1].pass);
  }
  SUBCASE("not-split: every block the same, or the whole dimension on each rank") {
    auto t = one(map, {{{"s", rows(x, 0, 3)}}, {{"s", rows(x, 0, 3)}}}, "s", x);
    CHECK(codes(t) == std::vector<std::string>{"not-split"});
    CHECK(t.diagnoses[0].text.starts_with("every block over tp equals block 0"));
    t = one(map, {{{"s", x}}, {{"s", x}}}, "s", x);
    CHECK(codes(t).front() == "not-split");
    CHECK(t.diagnoses[0].text.starts_with("rank 0 holds the whole of dimension 0 ([6, 4], the reference is [6, 4])"));
  }
  SUBCASE("rank-order: the blocks swapped") {
    const auto t = one(map, {{{"s", rows(x, 3, 6)}}, {{"s", rows(x, 0, 3)}}}, "s", x);
    CHECK(codes(t) == std::vector<std::string>{"rank-order"});
    CHECK(t.diagnoses[0].text.find("rank 0 holds block 1, rank 1 holds block 0") != std::string::npos);
  }
  SUBCASE("boundary: only the last rank's rows, or only the rows at the edge between ranks") {
    auto last = rows(x, 3, 6);
    last.v[4] += 0.5;  // row 4 of 6, in rank 1's block
    auto t = one(map, {{{"s", rows(x, 0, 3)}}, {{"s", last}}}, "s", x);
    CHECK(codes(t) == std::vector<std::string>{"boundary"});
    CHECK(t.diagnoses[0].text.starts_with("only rank 1's block (the last) is off"));
    const auto big = random_tensor({16, 2}, 11);
    auto a = rows(big, 0, 8), b = rows(big, 8, 16);
    a.v[7 * 2] += 0.5;  // row 7 and row 8: both sides of the edge
    b.v[0] += 0.5;
    t = one(map, {{{"s", a}}, {{"s", b}}}, "s", big);
    CHECK(codes(t) == std::vector<std::string>{"boundary"});
    CHECK(t.diagnoses[0].text.starts_with("only indices next to the boundaries between ranks are off (2 of 16 indices of dimension 0)"));
  }
  SUBCASE("mismatch, missing and shape") {
    auto a = rows(x, 0, 3), b = rows(x, 3, 6);
    a.v[0] += 1;
    b.v[11] += 1;
    CHECK(codes(one(map, {{{"s", a}}, {{"s", b}}}, "s", x)) == std::vector<std::string>{"mismatch"});
    CHECK(codes(one(map, {{{"s", rows(x, 0, 3)}}, {}}, "s", x)) == std::vector<std::string>{"missing"});
    const auto t = one(map, {{{"r", x}}, {{"r", rows(x, 0, 5)}}}, "r", x);
    CHECK(codes(t) == std::vector<std::string>{"shape"});
    CHECK(t.diagnoses[0].text == "the ranks of axis tp hold shapes [6, 4] and [5, 4] of a tensor declared R on it");
  }
  CHECK_THROWS_WITH_AS(compare_dumps(map, {memory_dump({})}, ref), "1 rank dumps for a mesh of 2 ranks", LayoutMapError);
}
