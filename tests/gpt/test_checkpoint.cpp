// Checkpoints that cannot be lost or loaded wrong (issue 14): atomic saves that survive a killed
// writer, a hash per tensor and per file, meta.json bound to its tensors.bin, the config and the
// optimizer state checked, write errors reported. Every failure is a CheckpointError whose text
// names the file, the entry and what differs.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpt_cases.hpp"
#include "shardalg/nn/train/checkpoint.hpp"
#include "testing.hpp"

using namespace gt;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& tag) {
  const auto d = fs::temp_directory_path() / ("shardalg_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

nn::GptConfig small(int layers, std::uint64_t seed) {
  auto c = tiny(false);
  c.layers = layers;
  c.seed = seed;
  return c;
}

/// A model trained `steps` steps with Adam on one rank, saved to `ck`; returns its masters.
nn::Masters save_trained(const fs::path& ck, const nn::GptConfig& c, int steps) {
  const Group g{SelfComm{}};
  auto model = nn::Gpt<double>::init(c, g);
  nn::Adam<double> opt(adam_options());
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = batch_at(c, kText, s);
    model.forward_backward(x, y);
    model.step(opt, 1.0);
  }
  nn::save_checkpoint(ck, model, opt);
  return model.masters();
}

std::string load_error(const fs::path& ck, const nn::LoadOptions& o = {}) {
  try {
    nn::Adam<double> opt(adam_options());
    (void)nn::load_checkpoint<double>(ck, Group{SelfComm{}}, opt, o);
  } catch (const nn::CheckpointError& e) {
    return e.what();
  }
  return "";
}

/// meta.json's hash set to match its (edited) content, as a writer that got a field wrong would.
void restamp(nlohmann::json& meta) { meta["meta_fnv1a64"] = nn::detail::hex64(nn::detail::meta_hash(meta)); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace

TEST_CASE("checkpoint: a save is a link to a complete version; loading it restores the model bit for bit") {
  const auto d = fresh_dir("link");
  const auto ck = d / "ck";
  const auto a = save_trained(ck, small(1, 1), 2);
  CHECK(fs::is_symlink(ck));
  CHECK(fs::exists(ck / "meta.json"));
  const auto first = fs::read_symlink(ck);
  const auto b = save_trained(ck, small(1, 2), 3);  // a second save replaces the first
  CHECK(fs::read_symlink(ck) != first);
  CHECK_FALSE(fs::exists(d / first));  // the previous version is removed after the switch
  int entries = 0;
  for (const auto& e : fs::directory_iterator(d)) entries += (void(e), 1);
  CHECK(entries == 2);  // ck and its one version
  const auto [meta, t] = nn::read_checkpoint_files(ck);
  for (const auto& [k, v] : b) CHECK(t.at(k) == v);
  CHECK(meta.at("version") == 2);
  fs::remove_all(d);
}

TEST_CASE("checkpoint: 150 random byte flips in tensors.bin, each refused naming the tensor") {
  const auto d = fresh_dir("flips");
  const auto ck = d / "ck";
  save_trained(ck, small(1, 1), 2);
  const auto bin = ck / "tensors.bin";
  const std::string good = slurp(bin);
  std::mt19937_64 rng(14);
  int refused = 0;
  for (int i = 0; i < 150; ++i) {
    std::string bad = good;
    const auto at = std::uniform_int_distribution<std::size_t>(0, bad.size() - 1)(rng);
    bad[at] = static_cast<char>(bad[at] ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng)));
    spit(bin, bad);
    const std::string e = load_error(ck);
    CAPTURE(at);
    CAPTURE(e);
    const bool named = e.rfind("checkpoint: " + bin.string() + ": tensor ", 0) == 0 && e.find("(the data is corrupt)") != std::string::npos;
    CHECK(named);
    refused += named;
  }
  spit(bin, good);
  CHECK(load_error(ck).empty());
  MESSAGE("byte flips refused: " << refused << "/150");
  fs::remove_all(d);
}

TEST_CASE("checkpoint: meta.json changed, unparsable, or beside another save's tensors.bin is refused") {
  const auto d = fresh_dir("meta");
  const auto one = d / "one", two = d / "two", seed = d / "seed";
  save_trained(one, small(1, 1), 2);
  save_trained(two, small(2, 1), 2);
  save_trained(seed, small(1, 7), 2);
  const auto meta = one / "meta.json";
  const std::string good = slurp(meta);

  // A changed value (the step count) that still parses.
  std::string edited = good;
  const auto pos = edited.find("\"step\": 2");
  REQUIRE(pos != std::string::npos);
  edited.replace(pos, 9, "\"step\": 3");
  spit(meta, edited);
  CHECK(load_error(one).rfind("checkpoint: " + meta.string() + ": content hash ", 0) == 0);

  // Truncated JSON.
  spit(meta, good.substr(0, good.size() / 2));
  CHECK(load_error(one).rfind("checkpoint: " + meta.string() + " is not valid JSON: ", 0) == 0);

  // A 1-layer meta.json beside a 2-layer tensors.bin.
  spit(meta, good);
  spit(one / "tensors.bin", slurp(two / "tensors.bin"));
  const std::string e1 = load_error(one);
  CHECK(e1.rfind("checkpoint: " + (one / "tensors.bin").string() + " is ", 0) == 0);
  CHECK(e1.find("(the two files are not from one save)") != std::string::npos);

  // Another seed's tensors.bin of the same shapes: the size agrees, the hashes do not.
  spit(one / "tensors.bin", slurp(seed / "tensors.bin"));
  CHECK(load_error(one).find("(the data is corrupt)") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("checkpoint: a missing Adam moment is an error unless a fresh optimizer is asked for") {
  const auto d = fresh_dir("moment");
  const auto ck = d / "ck";
  save_trained(ck, small(1, 1), 2);
  auto [meta, t] = nn::read_checkpoint_files(ck);
  REQUIRE(t.erase("optim.m.layers.0.attn.wq") == 1);
  nn::write_checkpoint_files(ck, meta, t);  // consistent hashes, one entry short
  CHECK(load_error(ck) == "checkpoint: " + (ck / "meta.json").string() +
                              ": optimizer state has no m.layers.0.attn.wq (after 2 steps every parameter has one; "
                              "load with optimizer_state = false to start the optimizer fresh)");
  CHECK(load_error(ck, {.optimizer_state = false}).empty());
  fs::remove_all(d);
}

TEST_CASE("checkpoint: the model's config must match the saved one where it shapes the state") {
  const auto d = fresh_dir("config");
  const auto ck = d / "ck";
  save_trained(ck, small(1, 1), 1);
  auto want = small(2, 1);
  CHECK(load_error(ck, {.expect = want}) ==
        "checkpoint: " + (ck / "meta.json").string() + ": config.layers is 1, the model expects 2");
  want = small(1, 1);
  want.hidden = 64;
  CHECK(load_error(ck, {.expect = want}) ==
        "checkpoint: " + (ck / "meta.json").string() + ": config.hidden is 32, the model expects 64");
  want = small(1, 5);  // dropout 0.1 draws from the seed
  CHECK(load_error(ck, {.expect = want}) ==
        "checkpoint: " + (ck / "meta.json").string() + ": config.seed is 1, the model expects 5");
  want = small(1, 1);
  want.batch = 8;  // a run's choice, not the state's
  want.sp = true;
  CHECK(load_error(ck, {.expect = want}).empty());
  fs::remove_all(d);
}

TEST_CASE("checkpoint: a write error is reported and the previous checkpoint survives (size limit = disk full)") {
  const auto d = fresh_dir("full");
  const auto ck = d / "ck";
  const auto a = save_trained(ck, small(1, 1), 2);
  const auto [meta, t] = nn::read_checkpoint_files(ck);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child hits a 64 KiB file-size limit, as a full disk would stop it
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      nn::write_checkpoint_files(ck, meta, t);
    } catch (const nn::CheckpointError& e) {
      const std::string w = e.what();
      ::_exit(w.find("checkpoint: cannot write ") == 0 && w.find("tensors.bin: File too large") != std::string::npos ? 42 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);  // 42: CheckpointError naming the file and the reason
  const auto [m2, t2] = nn::read_checkpoint_files(ck);
  for (const auto& [k, v] : a) CHECK(t2.at(k) == v);
  // And a path whose parent is a file: refused before anything is written.
  spit(d / "file", "x");
  try {
    nn::write_checkpoint_files(d / "file" / "ck", meta, t);
    FAIL("no error");
  } catch (const nn::CheckpointError& e) {
    CHECK(std::string(e.what()) == "checkpoint: cannot write " + (d / "file" / "ck").string() + ": " +
                                       (d / "file").string() + " is not a directory");
  }
  fs::remove_all(d);
}

TEST_CASE("checkpoint: a writer killed at a random point leaves the old or the new checkpoint, never neither (24 trials)") {
  const auto d = fresh_dir("kill");
  const auto ck = d / "ck";
  // Two versions of a few MB each, so that a save takes long enough to be interrupted.
  nn::Masters va, vb;
  for (int i = 0; i < 6; ++i) {
    va.emplace("w" + std::to_string(i), testing::random_int<double>(384, 384, 100 + i));
    vb.emplace("w" + std::to_string(i), testing::random_int<double>(384, 384, 200 + i));
  }
  const nlohmann::json meta_a{{"which", "a"}}, meta_b{{"which", "b"}};
  nn::write_checkpoint_files(ck, meta_a, va);
  const auto t0 = std::chrono::steady_clock::now();
  nn::write_checkpoint_files(ck, meta_b, vb);
  const double save_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937_64 rng(1414);
  int old_seen = 0, new_seen = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const bool to_b = trial % 2 == 0;  // alternate, so that each trial replaces what is there
    nn::write_checkpoint_files(ck, to_b ? meta_a : meta_b, to_b ? va : vb);
    const auto delay = std::uniform_real_distribution<double>(0, 2.0 * save_us)(rng);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      nn::write_checkpoint_files(ck, to_b ? meta_b : meta_a, to_b ? vb : va);
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(delay));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CAPTURE(trial);
    CAPTURE(delay);
    const auto [meta, t] = nn::read_checkpoint_files(ck);  // throws if neither is whole
    const bool is_a = meta.at("which") == "a";
    const auto& want = is_a ? va : vb;
    for (const auto& [k, v] : want) CHECK(t.at(k) == v);
    (is_a == to_b ? old_seen : new_seen) += 1;
  }
  MESSAGE("killed writers: " << old_seen << " left the old checkpoint, " << new_seen << " the new one (save takes "
                             << save_us / 1000 << " ms)");
  CHECK(old_seen + new_seen == 24);
  fs::remove_all(d);
}

TEST_CASE("checkpoint: two ranks loading while a writer saves in a loop agree on one save, never a spurious error") {
  const auto d = fresh_dir("race");
  const auto ck = d / "ck";
  save_trained(ck, small(1, 1), 2);
  const auto first = nn::read_checkpoint_files(ck);  // no structured bindings: the writer captures these
  const nlohmann::json& meta = first.first;
  const nn::Masters& ta = first.second;
  save_trained(ck, small(1, 2), 2);
  const nn::Masters tb = nn::read_checkpoint_files(ck).second;
  REQUIRE(ta.at("embedding") != tb.at("embedding"));
  // Save i holds step i and the weights of seed 1 (i even) or seed 2 (i odd): a load that mixed
  // two saves, or whose ranks read different ones, shows as a step/weights mismatch.
  std::atomic<bool> stop{false};
  std::atomic<int> saves{0};
  std::string writer_error;
  std::thread writer([&] {
    try {
      for (int i = 0; !stop; ++i) {
        auto m = meta;
        m["step"] = i;
        nn::write_checkpoint_files(ck, m, i % 2 == 0 ? ta : tb);
        saves = i + 1;
      }
    } catch (const std::exception& e) {
      writer_error = e.what();
    }
  });
  while (saves < 2) std::this_thread::yield();
  int loads = 0, disagree = 0, mixed = 0;
  std::vector<std::string> errors;
  std::set<long> seen;
  const auto t0 = std::chrono::steady_clock::now();
  while (loads < 400 && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1200)) {
    ++loads;
    long step[2] = {-1, -1};
    bool weights_match[2] = {false, false};
    try {
      run_ranks(2, [&](ThreadComm& comm) {
        nn::Adam<double> opt(adam_options());
        auto model = nn::load_checkpoint<double>(ck, Group(comm), opt);
        const auto emb = model.masters().at("embedding");
        step[comm.rank()] = model.steps();
        weights_match[comm.rank()] = emb == (model.steps() % 2 == 0 ? ta : tb).at("embedding");
      });
    } catch (const std::exception& e) {
      errors.push_back(e.what());
      continue;
    }
    disagree += step[0] != step[1];
    mixed += !weights_match[0] || !weights_match[1];
    seen.insert(step[0]);
  }
  stop = true;
  writer.join();
  MESSAGE(loads << " two-rank loads during " << saves.load() << " saves: " << seen.size() << " different saves read, "
                << disagree << " with ranks on different saves, " << mixed << " with weights of another save, "
                << errors.size() << " errors" << (errors.empty() ? "" : " (first: " + errors[0] + ")"));
  CHECK(writer_error.empty());
  CHECK(seen.size() >= 2);  // the writer did replace the checkpoint under the loads
  CHECK(disagree == 0);
  CHECK(mixed == 0);
  CHECK(errors.empty());
  fs::remove_all(d);
}

TEST_CASE("checkpoint: version 1 (no hashes) is refused naming the file, also with a tensor changed") {
  const auto d = fresh_dir("v1");
  const auto ck = d / "ck";
  save_trained(ck, small(1, 1), 2);
  std::string text = slurp(ck / "meta.json");
  const auto pos = text.find("\"version\": 2");
  REQUIRE(pos != std::string::npos);
  text.replace(pos, 12, "\"version\": 1");
  spit(ck / "meta.json", text);
  std::string bin = slurp(ck / "tensors.bin");
  bin[100] = static_cast<char>(bin[100] ^ 4);
  spit(ck / "tensors.bin", bin);
  CHECK(load_error(ck) == "checkpoint: " + (ck / "meta.json").string() +
                              ": version is 1, expected 2 (version 1 has no hashes; it is not loaded unverified)");
  // A plain directory holding a version-2 save (a copy of the version) loads; "copy/" names it too.
  save_trained(ck, small(1, 1), 2);
  fs::copy(ck, d / "copy");  // follows the link: a plain directory with the two files
  REQUIRE_FALSE(fs::is_symlink(d / "copy"));
  CHECK(load_error(d / "copy").empty());
  CHECK(load_error(d / "copy" / "").empty());
  fs::remove_all(d);
}

TEST_CASE("checkpoint: meta.json fields of a wrong type, missing, negative or huge are refused naming the key") {
  const auto d = fresh_dir("fields");
  const auto ck = d / "ck", two = d / "two";
  save_trained(ck, small(1, 1), 2);
  save_trained(two, small(2, 1), 1);
  const auto meta_path = ck / "meta.json";
  const nlohmann::json good = nlohmann::json::parse(slurp(meta_path));
  const std::string good_text = slurp(meta_path), bin = (ck / "tensors.bin").string();
  const std::string t0 = good.at("tensors")[0].at("name");  // the first tensor, its size in bytes
  const auto b0 = good.at("tensors")[0].at("rows").get<std::uint64_t>() * good.at("tensors")[0].at("cols").get<std::uint64_t>() * 8;
  const auto bytes = good.at("tensors_bin").at("bytes").get<std::uint64_t>();
  struct Probe {
    std::function<void(nlohmann::json&)> edit;
    bool restamp;  // false: the field is read before the content hash is checked
    std::string error;
  };
  using J = nlohmann::json;
  const std::vector<Probe> probes = {
      {[](J& m) { m["version"] = "2"; }, false, R"(version is "2", expected 2)"},
      {[](J& m) { m["version"] = 2.0; }, false, R"(version is 2.0, expected 2)"},
      {[](J& m) { m["version"] = 3; }, false, R"(version is 3, expected 2)"},
      {[](J& m) { m.erase("version"); }, false, R"(version is missing, expected 2)"},
      {[](J& m) { m["format"] = 7; }, false, R"(format is 7, expected "shardalg-gpt-checkpoint")"},
      {[](J& m) { m.erase("meta_fnv1a64"); }, false, R"(meta_fnv1a64 is missing, expected 16 hexadecimal digits)"},
      {[](J& m) { m["config"]["hidden"] = "32"; }, true, R"(config.hidden is "32", expected an integer >= 1)"},
      {[](J& m) { m["config"]["hidden"] = -32; }, true, R"(config.hidden is -32, expected an integer >= 1)"},
      {[](J& m) { m["config"]["layers"] = 1e300; }, true, R"(config.layers is 1e+300, expected an integer >= 1)"},
      {[](J& m) { m["config"]["layers"] = 1.0; }, true, R"(config.layers is 1.0, expected an integer >= 1)"},
      {[](J& m) { m["config"]["seed"] = -1; }, true, R"(config.seed is -1, expected an integer in [0, 18446744073709551615])"},
      {[](J& m) { m["config"]["activation"] = "relu"; }, true,
       R"(config.activation is "relu", expected one of "gelu_tanh", "gelu_erf", "swiglu")"},
      {[](J& m) { m["config"]["norm"] = 3; }, true, R"(config.norm is 3, expected one of "layernorm", "rmsnorm")"},
      {[](J& m) { m["config"]["bias"] = "yes"; }, true, R"(config.bias is "yes", expected true or false)"},
      {[](J& m) { m["config"]["eps"] = nullptr; }, true, R"(config.eps is null, expected a finite number)"},
      {[](J& m) { m["config"]["attn_dropout"] = "0.1"; }, true, R"(config.attn_dropout is "0.1", expected a finite number)"},
      {[](J& m) { m.erase("config"); }, true, R"(config is missing, expected an object)"},
      {[](J& m) { m["step"] = -1; }, true, R"(step is -1, expected an integer >= 0)"},
      {[](J& m) { m["step"] = 18446744073709551615ull; }, true, R"(step is 18446744073709551615, expected an integer >= 0)"},
      {[](J& m) { m["step"] = 1e300; }, true, R"(step is 1e+300, expected an integer >= 0)"},
      {[](J& m) { m["optimizer"]["kind"] = "rmsprop"; }, true, R"(optimizer.kind is "rmsprop", expected one of "adam", "sgd")"},
      {[](J& m) { m["optimizer"]["step"] = "2"; }, true, R"(optimizer.step is "2", expected an integer >= 0)"},
      {[](J& m) { m["tensors_bin"]["bytes"] = -8; }, true,
       R"(tensors_bin.bytes is -8, expected an integer in [0, 18446744073709551615])"},
      {[](J& m) { m["tensors"] = J::object(); }, true, R"(tensors is {}, expected an array)"},
      {[](J& m) { m["tensors"][0]["rows"] = 1e18; }, true,
       "tensors[0].rows is 1e+18, expected an integer in [0, " + std::to_string(bytes / 8) + "]"},
      {[](J& m) { m["tensors"][0]["rows"] = 4611686018427387904ull; }, true,
       "tensors[0].rows is 4611686018427387904, expected an integer in [0, " + std::to_string(bytes / 8) + "]"},
      {[&](J& m) { m["tensors"][0]["rows"] = bytes / 8, m["tensors"][0]["cols"] = 2; }, true,
       "tensor " + t0 + " is " + std::to_string(bytes / 8) + "x2 at byte 0, past the end of the " + std::to_string(bytes) +
           " bytes of " + bin},
      {[](J& m) { m["tensors"][1]["offset"] = 0; }, true,
       "tensors[1].offset is 0, expected " + std::to_string(b0) + " (tensors are stored back to back)"},
      {[](J& m) { m["tensors"][0]["fnv1a64"] = 123; }, true, R"(tensors[0].fnv1a64 is 123, expected 16 hexadecimal digits)"},
      {[&](J& m) { m["tensors"][1]["name"] = t0; }, true,
       "tensors[1].name is \"" + t0 + "\", expected a name no other tensor has"},
      {[](J& m) { m["config"]["vocab"] = 1 << 30; }, true,
       "config.vocab and hidden say 1073741824x32, tensor embedding is 256x32"},
      {[](J& m) { m["config"]["layers"] = 3; }, true, "no tensor layers.2.mlp.w2 (config.ffn and hidden say 128x32)"},
  };
  for (const auto& p : probes) {
    nlohmann::json m = good;
    p.edit(m);
    if (p.restamp) restamp(m);
    spit(meta_path, m.dump(2));
    CAPTURE(p.error);
    CHECK(load_error(ck) == "checkpoint: " + meta_path.string() + ": " + p.error);
  }
  // Not a JSON object at all; and a 1-layer config over a 2-layer save's tensors.
  spit(meta_path, "[1]");
  CHECK(load_error(ck) == "checkpoint: " + meta_path.string() + ": the file is [1], expected a JSON object");
  nlohmann::json m = nlohmann::json::parse(slurp(two / "meta.json"));
  m["config"]["layers"] = 1;
  restamp(m);
  spit(two / "meta.json", m.dump(2));
  CHECK(load_error(two) == "checkpoint: " + (two / "meta.json").string() +
                               ": config.layers is 1, but tensor layers.1.attn.bk is stored");
  spit(meta_path, good_text);
  CHECK(load_error(ck).empty());
  MESSAGE((probes.size() + 2) << " meta.json probes, each refused naming the key");
  fs::remove_all(d);
}

TEST_CASE("checkpoint: attention dropout is saved, restored and checked against the model's") {
  const auto d = fresh_dir("attn");
  const auto ck = d / "ck";
  auto c = small(1, 1);
  c.attn_dropout = 0.25;
  save_trained(ck, c, 1);
  nn::Adam<double> opt(adam_options());
  CHECK(nn::load_checkpoint<double>(ck, Group{SelfComm{}}, opt).config().attn_dropout == 0.25);
  auto want = c;
  want.attn_dropout = 0;
  CHECK(load_error(ck, {.expect = want}) ==
        "checkpoint: " + (ck / "meta.json").string() + ": config.attn_dropout is 0.25, the model expects 0.0");
  // A file from before attn_dropout was saved (no key): it restores 0, and a model that expects
  // 0.25 refuses it by name.
  nlohmann::json m = nlohmann::json::parse(slurp(ck / "meta.json"));
  m["config"].erase("attn_dropout");
  restamp(m);
  spit(ck / "meta.json", m.dump(2));
  CHECK(nn::load_checkpoint<double>(ck, Group{SelfComm{}}, opt).config().attn_dropout == 0.0);
  CHECK(load_error(ck, {.expect = c}) ==
        "checkpoint: " + (ck / "meta.json").string() + ": config.attn_dropout is 0.0, the model expects 0.25");
  fs::remove_all(d);
}
