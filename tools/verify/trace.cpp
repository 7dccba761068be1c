// tools/verify/trace.cpp — the Chrome trace of a run, with nlohmann-json.
#include "trace.hpp"

#include <fstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace sv {

using json = nlohmann::json;

std::string trace_events_json(int rank, const shardalg::verify::EventLog& log) {
  json ev = json::array();
  const std::string nmr = "rank " + std::to_string(rank);
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
  for (const auto& x : log.events) {
    json j{{"name", x.name}, {"cat", x.cat}, {"ph", "X"}, {"ts", x.ts_us}, {"dur", x.dur_us}, {"pid", rank}, {"tid", rank}};
    if (x.args) {
      json a{{"elements", x.args->elements}, {"bytes", x.args->bytes}, {"layouts", x.args->layouts}, {"dtype", x.args->dtype}};
      if (x.args->scope) a["scope"] = *x.args->scope;
      j["args"] = std::move(a);
    }
    ev.push_back(std::move(j));
  }
  return ev.dump();
}

std::size_t write_trace(const std::string& path, const std::vector<std::string>& rank_events, int p,
                        const std::string& backend) {
  json events = json::array();
  for (const auto& s : rank_events)
    for (auto& ev : json::parse(s)) events.push_back(std::move(ev));
  const std::size_t n = events.size();
  json tr{{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"tool", "shardalg-verify"}, {"tp", p}, {"backend", backend}}}};
  std::ofstream f(path);
  if (!f) throw std::runtime_error("--trace: cannot write " + path);
  f << tr.dump() << "\n";
  return n;
}

}  // namespace sv
