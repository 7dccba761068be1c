// tools/verify/report_json.hpp — the machine-readable report (--json), with nlohmann-json.
#pragma once

#include <string>

#include "options.hpp"
#include "result.hpp"

namespace sv {

/// The report as JSON text (indented by 2, no final newline): config, tolerance, calibration,
/// one object per layer, the ledger, the summary, and --explain's listing when there is one.
std::string format_json(const Options& o, int p, const RankResult& r, bool pass, Index padded);

}  // namespace sv
