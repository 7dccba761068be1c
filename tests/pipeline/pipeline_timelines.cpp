// pipeline_timelines — the timelines and the bubble table of docs/pipeline.md, from the simulator.
//
//   pipeline_timelines                       print the bubble table and the four timelines
//   pipeline_timelines --trace FILE          also write them as a Chrome trace (chrome://tracing,
//                                            ui.perfetto.dev): one process per schedule, one row
//                                            per rank, 1 time unit = 1 ms
//   pipeline_timelines --check-doc FILE      exit 1 unless every printed block appears verbatim in
//                                            FILE (the CTest test keeps docs/pipeline.md current)
//
// It also checks each simulated bubble against its closed form and exits 1 on a difference.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <shardalg/pipeline/schedule.hpp>
#include <shardalg/pipeline/simulate.hpp>

using namespace shardalg::pipeline;

namespace {

/// One character per tick; a tick is 1/v time unit, the cost of a chunk's F under unit costs.
/// Row 1: the op kind (a fused BW shows as "BW" over its two ticks), '.' when idle.
/// Row 2: the micro-batch. Row 3 (v > 1): the model chunk.
std::string timeline_text(const Schedule& s, const Simulation& sim) {
  const int ticks_per_unit = s.v;
  const int width = static_cast<int>(std::lround(sim.makespan * ticks_per_unit));
  std::ostringstream out;
  // A ruler: the time in units at every 5 units.
  std::string ruler(static_cast<std::size_t>(width) + 1, ' ');
  for (int u = 0; u * ticks_per_unit <= width; u += 5) {
    const std::string label = std::to_string(u);
    for (std::size_t k = 0; k < label.size() && u * ticks_per_unit + k < ruler.size(); ++k)
      ruler[static_cast<std::size_t>(u * ticks_per_unit) + k] = label[k];
  }
  while (!ruler.empty() && ruler.back() == ' ') ruler.pop_back();
  out << "time    " << ruler << "\n";
  for (int r = 0; r < s.p; ++r) {
    std::string kind(static_cast<std::size_t>(width), '.'), mb(static_cast<std::size_t>(width), ' '),
        chunk(static_cast<std::size_t>(width), ' ');
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      const auto a = static_cast<std::size_t>(std::lround(sim.times[r][i].start * ticks_per_unit));
      const auto b = static_cast<std::size_t>(std::lround(sim.times[r][i].end * ticks_per_unit));
      const std::string name(kind_name(op.kind));
      for (std::size_t k = a; k < b; ++k) {
        // A fused BW of two ticks reads "BW"; any other op repeats its letter.
        kind[k] = op.kind == OpKind::BW ? (k - a < (b - a) / 2 ? 'B' : 'W') : name[0];
        mb[k] = "0123456789abcdefghijklmnopqrstuvwxyz"[op.microbatch % 36];
        chunk[k] = static_cast<char>('0' + op.chunk % 10);
      }
    }
    auto trim = [](std::string x) {
      while (!x.empty() && x.back() == ' ') x.pop_back();
      return x;
    };
    out << "rank " << r << "  " << kind << "\n";
    out << "  mb    " << trim(mb) << "\n";
    if (s.v > 1) out << "  chunk " << trim(chunk) << "\n";
  }
  return out.str();
}

void append_trace(std::ostream& json, bool& first, int pid, const Schedule& s, const Simulation& sim) {
  auto sep = [&] {
    json << (first ? "\n" : ",\n");
    first = false;
  };
  sep();
  json << R"({"name":"process_name","ph":"M","pid":)" << pid << R"(,"args":{"name":")" << s.name << " p=" << s.p
       << " m=" << s.m << " v=" << s.v << R"("}})";
  for (int r = 0; r < s.p; ++r) {
    sep();
    json << R"({"name":"thread_name","ph":"M","pid":)" << pid << R"(,"tid":)" << r << R"(,"args":{"name":"rank )"
         << r << R"("}})";
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Op& op = s.ranks[r][i];
      const OpTime t = sim.times[r][i];
      sep();
      json << R"({"name":")" << kind_name(op.kind) << op.microbatch;
      if (s.v > 1) json << "." << op.chunk;
      json << R"(","cat":")" << kind_name(op.kind) << R"(","ph":"X","pid":)" << pid << R"(,"tid":)" << r
           << R"(,"ts":)" << t.start * 1000 << R"(,"dur":)" << (t.end - t.start) * 1000
           << R"(,"args":{"microbatch":)" << op.microbatch << R"(,"chunk":)" << op.chunk << "}}";
    }
  }
}

/// a/b in lowest terms, "0" for 0.
std::string fraction(long a, long b) {
  const long g = std::gcd(a, b);
  if (a == 0) return "0";
  return b / g == 1 ? std::to_string(a / g) : std::to_string(a / g) + "/" + std::to_string(b / g);
}

struct Row {
  Schedule s;
  std::string formula;  // the closed form, in words
  long num, den;        // its value at (p, m, v)
};

std::string bubble_table(bool& ok) {
  std::vector<Row> rows;
  const std::vector<std::pair<int, int>> pms = {{4, 4}, {4, 8}, {4, 16}, {8, 8}, {8, 32}};
  for (auto [p, m] : pms) {
    rows.push_back({afab(p, m), "(p−1)/m", p - 1, m});
    rows.push_back({one_f_one_b(p, m), "(p−1)/m", p - 1, m});
    rows.push_back({interleaved_1f1b(p, m, 2), "(p−1)/(v·m)", p - 1, 2L * m});
    rows.push_back({interleaved_1f1b(p, m, 3), "(p−1)/(v·m)", p - 1, 3L * m});
    rows.push_back({zb_h1(p, m), "(p−1)/(3m)", p - 1, 3L * m});
  }
  std::ostringstream out;
  out << "| schedule | p | m | v | makespan | bubble / ideal, simulated | closed form | activations held, rank 0 … p−1 |\n";
  out << "|---|---|---|---|---|---|---|---|\n";
  for (const Row& row : rows) {
    const Simulation sim = simulate(row.s);
    const double expect = double(row.num) / double(row.den);
    if (std::abs(sim.bubble_fraction - expect) > 1e-12) {
      std::cerr << "pipeline_timelines: " << row.s.name << " p=" << row.s.p << " m=" << row.s.m << " v=" << row.s.v
                << ": simulated bubble " << sim.bubble_fraction << " != " << expect << "\n";
      ok = false;
    }
    char bubble[32];
    std::snprintf(bubble, sizeof bubble, "%.6f", sim.bubble_fraction);
    char makespan[32];
    std::snprintf(makespan, sizeof makespan, "%g", sim.makespan);
    out << "| " << row.s.name << " | " << row.s.p << " | " << row.s.m << " | " << row.s.v << " | " << makespan << " | "
        << bubble << " | " << row.formula << " = " << fraction(row.num, row.den) << " |";
    for (int k : sim.peak_in_flight) out << " " << k;
    out << " |\n";
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_path, doc_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--trace" || a == "--check-doc") && i + 1 < argc) {
      (a == "--trace" ? trace_path : doc_path) = argv[++i];
    } else {
      std::cerr << "usage: pipeline_timelines [--trace FILE] [--check-doc FILE]\n";
      return 2;
    }
  }

  bool ok = true;
  std::vector<std::string> blocks;
  blocks.push_back(bubble_table(ok));

  const int p = 4, m = 8;
  const std::vector<Schedule> shown = {afab(p, m), one_f_one_b(p, m), interleaved_1f1b(p, m, 2), zb_h1(p, m)};
  std::ostringstream json;
  json << R"({"traceEvents":[)";
  bool first = true;
  int pid = 0;
  for (const Schedule& s : shown) {
    const Simulation sim = simulate(s);
    std::ostringstream head;
    char bubble[64];
    std::snprintf(bubble, sizeof bubble, "%g", sim.bubble_fraction);
    head << s.name << ", p = " << s.p << ", m = " << s.m << ", v = " << s.v << ": makespan " << sim.makespan
         << ", bubble / ideal = (" << sim.makespan << " − " << sim.ideal << ")/" << sim.ideal << " = " << bubble
         << "; one character = " << (s.v == 1 ? "1 time unit" : "1/" + std::to_string(s.v) + " time unit") << "\n";
    blocks.push_back(head.str() + timeline_text(s, sim));
    append_trace(json, first, pid++, s, sim);
  }
  json << "\n]}\n";

  for (const std::string& b : blocks) std::cout << b << "\n";

  if (!trace_path.empty()) {
    std::ofstream f(trace_path);
    f << json.str();
    if (!f) {
      std::cerr << "pipeline_timelines: cannot write " << trace_path << "\n";
      return 1;
    }
    std::cout << "wrote " << trace_path << "\n";
  }
  if (!doc_path.empty()) {
    std::ifstream f(doc_path);
    if (!f) {
      std::cerr << "pipeline_timelines: cannot read " << doc_path << "\n";
      return 1;
    }
    const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (const std::string& b : blocks)
      if (doc.find(b) == std::string::npos) {
        std::cerr << "pipeline_timelines: this block is not in " << doc_path << " (regenerate the doc):\n" << b;
        ok = false;
      }
  }
  return ok ? 0 : 1;
}
