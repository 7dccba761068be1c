// tools/verify/precision.hpp — the rounding-bound check (--dtype bf16 | fp16, --dtype float
// --bounds): every block alone in the program's element type against its dense twin over
// precision::Running; error ÷ derived bound per tensor (precision.cpp).
#pragma once

#include <string>
#include <vector>

#include "options.hpp"

namespace sv {

/// One tensor of one block: error ÷ bound over its elements (max and median); `note` says why the
/// bound itself gave no verdict (precision::PrecisionError), and the row then fails.
struct BoundRow {
  std::string layer, tensor;
  Index elements = 0;
  double max_ratio = 0, median_ratio = 0;
  std::string note;
  [[nodiscard]] bool pass() const { return note.empty() && max_ratio <= 1.0; }
};

/// The rows of o's model at TP p on threads (sequence-parallel when o.sp).
std::vector<BoundRow> bound_rows(const Options& o, int p);
/// The check, printed as text or JSON (o.json); the exit status: 0 pass, 1 a tensor over its bound.
int run_bounds(const Options& o, int p);

}  // namespace sv
