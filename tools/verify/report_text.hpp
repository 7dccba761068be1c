// tools/verify/report_text.hpp — the human-readable report (formatted with fmt).
#pragma once

#include <string>

#include "options.hpp"
#include "result.hpp"

namespace sv {

/// "512 B", "32.0 KiB", "1.1 MiB", "2.0 GiB".
std::string format_bytes(double b);
/// "0", "841.9 µs", "6.78 ms", "1.25 s".
std::string format_time(double s);
/// "2.4e-15".
std::string format_err(double e);
/// "2 AR 64.0 KiB", "1 AG+1 RS 64.0 KiB", "0" (AR all_reduce, AG all_gather, RS reduce_scatter).
std::string tally_text(const verify::CommTally& t);

/// The whole report: configuration, errors per layer, collectives, time and memory, --explain's
/// listing when there is one, the summary and PASS or FAIL.
std::string format_text(const Options& o, int p, const RankResult& r, bool pass, Index padded);

}  // namespace sv
