// tools/verify/compare.cpp — `shardalg-verify compare`: another framework's run, from its
// tensors. Every rank's safetensors dump is reassembled by the layout map and compared with a
// one-rank reference; where a tensor differs, the diagnosis says which layout rule it breaks
// (include/shardalg/verify/compare.hpp; docs/compare.md).
//
//   shardalg-verify compare --ranks 'dump/rank*.safetensors' --reference dump/reference.safetensors --map dump/map.json
//
// Exit status: 0 every tensor passes, 1 a tensor differs, 2 bad input (a file that cannot be read
// as safetensors, a bad map, the wrong number of rank files): one line on stderr naming it.
#include "compare.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include <glob.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shardalg/verify/compare.hpp"

namespace sv {

namespace {

using namespace shardalg::verify;
using shardalg::detail::cat;

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// "rank10" after "rank9": digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      const std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      const auto xs = x.find_first_not_of('0'), ys = y.find_first_not_of('0');
      const std::string xn = xs == std::string::npos ? "" : x.substr(xs), yn = ys == std::string::npos ? "" : y.substr(ys);
      if (xn.size() != yn.size()) return xn.size() < yn.size();
      if (xn != yn) return xn < yn;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

/// Each argument a path or a glob pattern; the files in natural order (rank2 before rank10).
std::vector<std::string> expand(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  for (const auto& a : args) {
    if (a.find_first_of("*?[") == std::string::npos) {
      files.push_back(a);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(a.c_str(), 0, nullptr, &g);
    std::vector<std::string> found;
    for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (found.empty()) throw BadInput(cat("--ranks '", a, "': no file matches"));
    std::sort(found.begin(), found.end(), natural_less);
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string mesh_text(const LayoutMap& m) {
  std::string s;
  for (const auto& [axis, n] : m.mesh) s += cat(s.empty() ? "" : " × ", axis, "=", n);
  return s;
}

std::string error_text(double e) { return std::isnan(e) ? "-" : std::isinf(e) ? "shape" : fmt::format("{:.2e}", e); }

void print_text(const CompareReport& rep, const LayoutMap& map, const std::vector<std::string>& files, const std::string& reference,
                bool all) {
  fmt::print("shardalg-verify compare: {} rank dumps on the mesh {}, against {}; tolerance {:.0e} (normwise relative)\n",
             files.size(), mesh_text(map), reference, rep.tol);
  fmt::print("  {:<56} {:<18} {:<14} {:>9} {:>9}  {}\n", "tensor", "layout", "shape", "error", "spread", "result");
  bool backward = false;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < rep.tensors.size(); ++i) {
    const auto& t = rep.tensors[i];
    if (!all && rep.first_divergence && i > *rep.first_divergence) break;
    if (t.backward && !backward) {
      fmt::print("  -- backward --\n");
      backward = true;
    }
    fmt::print("  {:<56} {:<18} {:<14} {:>9} {:>9}  {}\n", t.name, t.layout, shape_text(t.shape), error_text(t.rel_error),
               t.replica_spread > 0 ? fmt::format("{:.2e}", t.replica_spread) : "0", t.pass ? "ok" : "DIFFERS");
    for (const auto& d : t.diagnoses) fmt::print("      {}: {}\n", d.code, d.text);
    ++shown;
  }
  if (rep.first_divergence) {
    const auto& t = rep.tensors[*rep.first_divergence];
    std::size_t later = 0;
    for (std::size_t i = *rep.first_divergence + 1; i < rep.tensors.size(); ++i) later += !rep.tensors[i].pass;
    fmt::print("first divergence: {} ({}): {}\n", t.name, t.backward ? "backward" : "forward",
               t.diagnoses.empty() ? "differs" : t.diagnoses.front().code);
    if (!all && shown < rep.tensors.size())
      fmt::print("  {} of the {} tensors after it differ too (downstream of it, or further bugs); --all lists them\n", later,
                 rep.tensors.size() - shown);
  } else {
    fmt::print("all {} tensors agree with the reference\n", rep.tensors.size());
  }
  if (!rep.only_in_ranks.empty())
    fmt::print("not in the reference (not compared): {}\n", fmt::join(rep.only_in_ranks, ", "));
}

nlohmann::json to_json(const CompareReport& rep, const LayoutMap& map, const std::vector<std::string>& files) {
  nlohmann::json j;
  j["ranks"] = files;
  nlohmann::json mesh = nlohmann::json::object();
  for (const auto& [axis, n] : map.mesh) mesh[axis] = n;
  j["mesh"] = mesh;
  j["tolerance"] = rep.tol;
  j["pass"] = rep.pass;
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : rep.tensors) {
    nlohmann::json e{{"name", t.name}, {"phase", t.backward ? "backward" : "forward"}, {"layout", t.layout}, {"shape", t.shape},
                     {"pass", t.pass}, {"replica_spread", t.replica_spread}};
    e["error"] = std::isfinite(t.rel_error) ? nlohmann::json(t.rel_error) : nlohmann::json(nullptr);
    e["diagnoses"] = nlohmann::json::array();
    for (const auto& d : t.diagnoses) e["diagnoses"].push_back({{"code", d.code}, {"text", d.text}});
    j["tensors"].push_back(std::move(e));
  }
  j["first_divergence"] = rep.first_divergence ? nlohmann::json(rep.tensors[*rep.first_divergence].name) : nlohmann::json(nullptr);
  j["only_in_ranks"] = rep.only_in_ranks;
  return j;
}

}  // namespace

int compare_main(int argc, char** argv) {
  CLI::App app{"shardalg-verify compare: a sharded run's safetensors dumps against a one-rank reference, by a layout map",
               "shardalg-verify compare"};
  std::vector<std::string> rank_args;
  std::string reference, map_path;
  double tol = 0;
  bool json = false, all = false;
  app.add_option("--ranks", rank_args, "every rank's dump: paths or glob patterns ('dump/rank*.safetensors'), rank order = natural order")
      ->required();
  app.add_option("--reference", reference, "the one-rank reference dump (whole tensors, the same names)")->required();
  app.add_option("--map", map_path, "the layout map (JSON: mesh, rules and/or preset; docs/compare.md)")->required();
  app.add_option("--tol", tol, "normwise relative tolerance (default: from the dumps' element types)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "a JSON report on stdout");
  app.add_flag("--all", all, "list every tensor (the text report stops at the first divergence)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "shardalg-verify compare: error: {}\n", e.what());
    return 2;
  }
  try {
    const LayoutMap map = read_layout_map(map_path);
    const auto files = expand(rank_args);
    if (static_cast<int>(files.size()) != map.ranks())
      throw BadInput(cat("--ranks gave ", files.size(), " file", files.size() == 1 ? "" : "s", "; the layout map's mesh (", mesh_text(map), ") has ",
                         map.ranks(), " ranks"));
    std::deque<SafetensorsFile> rank_files;  // the Dumps point into them: a deque keeps them in place
    std::vector<Dump> dumps;
    for (const auto& f : files) dumps.push_back(dump_of(rank_files.emplace_back(f)));
    const SafetensorsFile ref_file(reference);
    const CompareReport rep = compare_dumps(map, dumps, dump_of(ref_file), tol);
    if (json)
      fmt::print("{}\n", to_json(rep, map, files).dump(2));
    else
      print_text(rep, map, files, reference, all);
    return rep.pass ? 0 : 1;
  } catch (const std::exception& e) {  // SafetensorsError, LayoutMapError, BadInput
    fmt::print(stderr, "shardalg-verify compare: error: {}\n", e.what());
    return 2;
  }
}

}  // namespace sv
