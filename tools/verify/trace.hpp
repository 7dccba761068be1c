// tools/verify/trace.hpp — --trace: every rank's timeline (verify::EventLog) as Chrome-trace JSON
// (Trace Event Format; open it in https://ui.perfetto.dev or chrome://tracing).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "shardalg/observe/timing.hpp"

namespace sv {

/// One rank's events as a JSON array text: process and thread names, then one complete event
/// per phase and collective (pid = tid = rank).
std::string trace_events_json(int rank, const shardalg::verify::EventLog& log);

/// Writes {"traceEvents": [every rank's events], …} to `path`; returns the number of events.
/// Throws std::runtime_error when the file cannot be written.
std::size_t write_trace(const std::string& path, const std::vector<std::string>& rank_events, int p,
                        const std::string& backend);

}  // namespace sv
