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

/// Writes {"traceEvents": [every rank's events], …} to `path`; returns the number of events. The
/// text goes to a new file beside `path` (trace_temp_path), which then replaces `path` (rename):
/// the file is the whole trace or is left as it was. Throws ConfigError ("--trace FILE: …", with
/// the system's reason) when a write, the close or the rename fails.
std::size_t write_trace(const std::string& path, const std::vector<std::string>& rank_events, int p,
                        const std::string& backend);

/// --trace FILE, checked before the run spends its time: its directory exists and is writable, the
/// file, if present, is a regular file, and a file can be created beside it (created and removed
/// again: root passes access(2) on /proc too). Throws ConfigError naming the path.
void check_trace_writable(const std::string& path);

/// The file write_trace writes first: ".NAME.PID.tmp" in FILE's directory (a symbolic link's
/// target's: the link stays a link).
std::string trace_temp_path(const std::string& path);

}  // namespace sv
