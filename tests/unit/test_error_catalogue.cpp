// The diagnostic catalogue (include/shardalg/base/diagnostics.hpp) is the only place an
// [shardalg.E1xx] text is written, each ID in one entry, and docs/design.md §6's table lists
// exactly its IDs, each once. Read from the source tree (SHARDALG_SOURCE_DIR).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {
namespace fs = std::filesystem;
const fs::path root = SHARDALG_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in, "cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The IDs whose text starts a string literal ("[shardalg.E101] …) in `text`, with their counts.
std::map<int, int> texts_in(const std::string& text) {
  std::map<int, int> ids;
  static const std::regex id(R"re("\[shardalg\.E([0-9]+)\])re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), id); it != std::sregex_iterator(); ++it)
    ++ids[std::stoi((*it)[1])];
  return ids;
}
}  // namespace

TEST_CASE("error catalogue: every [shardalg.E…] text is in base/diagnostics.hpp and nowhere else in include/") {
  const auto cat = texts_in(slurp(root / "include/shardalg/base/diagnostics.hpp"));
  CHECK(cat.size() >= 30);  // the file was read and its texts found (34 IDs when this was written)
  int other_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "include/shardalg")) {
    if (!e.is_regular_file() || e.path().filename() == "diagnostics.hpp") continue;
    const auto ids = texts_in(slurp(e.path()));
    CHECK_MESSAGE(ids.empty(), e.path().string(), " writes ", ids.size(), " diagnostic text(s) of its own");
    ++other_files;
  }
  CHECK(other_files > 100);
  // One entry per ID: E150's per-pair texts are the one entry diagnose_conversion, E170's three
  // variants (left operand I, right operand I, neither side known) one guarded group of diagnose();
  // every other ID has one static_assert of diagnose().
  for (const auto& entry : cat) {  // not a structured binding: doctest's macros capture it
    const int id = entry.first, n = entry.second;
    CAPTURE(id);
    if (id == 150) CHECK(n >= 2);
    else if (id == 170) CHECK(n == 3);
    else CHECK(n == 1);
  }
}

TEST_CASE("error catalogue: docs/design.md's table lists exactly the catalogue's IDs, each once") {
  const auto cat = texts_in(slurp(root / "include/shardalg/base/diagnostics.hpp"));
  const std::string design = slurp(root / "docs/design.md");
  std::map<int, int> rows;
  static const std::regex row(R"(\n\| E([0-9]+) \|)");
  for (auto it = std::sregex_iterator(design.begin(), design.end(), row); it != std::sregex_iterator(); ++it)
    ++rows[std::stoi((*it)[1])];
  std::set<int> a, b;
  for (const auto& [id, n] : cat) a.insert(id);
  for (const auto& row : rows) {
    const int id = row.first, n = row.second;
    b.insert(id);
    CHECK_MESSAGE(n == 1, "E", id, " has ", n, " rows in docs/design.md");
  }
  for (int id : a) CHECK_MESSAGE(b.count(id), "E", id, " is in the catalogue, not in docs/design.md's table");
  for (int id : b) CHECK_MESSAGE(a.count(id), "E", id, " is in docs/design.md's table, not in the catalogue");
}
