// shardalg/observe/explain_log.hpp — what a program did, op by op: each op's operand and result
// layouts in notation, and the collectives it caused. Kept by a Ledger when asked:
//
//   Ledger ledger;
//   ledger.explain(true);                       // off by default: ops cost nothing then
//   Group g = ledgered(comm, ledger);
//   auto z = matmul(h, w2);                     // H[C] · W2[Row] → Z[Partial]
//   auto y = all_reduce(std::move(z));          // Z[Partial] → Y[R]
//   std::cout << ledger.explain_log();
//
//   scope  op          dtype  layouts                               collectives
//   -      matmul      f64    8x32[C] · 32x16[Row] → 8x16[Partial]  -
//   -      all_reduce  f64    8x16[Partial] → 8x16[R]               all_reduce 128 x f64 = 1.0 KiB on 2 ranks
//
// An op that calls other ops (matmul<To>, redistribute<To>) is a parent: its children are
// indented under it, and each collective is listed under the innermost op that issued it. A
// collective issued outside every op (a raw Group call) gets a line of its own, op "-".
#pragma once

#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "shardalg/comm/communicator.hpp"

namespace shardalg {

/// One op of the explain log.
struct ExplainRecord {
  std::string scope;  ///< the ledger scope it ran in ("" at top level)
  int depth = 0;      ///< 0 for a top-level op, 1 for an op called by an op, …
  std::string op;     ///< "matmul", "all_reduce", "add", … ; "-" for a bare collective
  std::string dtype;  ///< element type, "f64", "f32", …
  std::string layouts;                   ///< "8x32[C] · 32x16[Row] → 8x16[Partial]"
  std::vector<std::size_t> collectives;  ///< indices into Ledger::entries() it caused directly
};

namespace detail {
/// "1.0 KiB": bytes in binary units, one decimal.
inline std::string human_bytes(std::size_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", b);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, unit[u]);
  return buf;
}

/// Pads `s` to `w` characters, counting UTF-8 code points (the notation uses "·" and "→").
inline std::string pad_utf8(const std::string& s, std::size_t w) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n >= w ? s + "  " : s + std::string(w - n + 2, ' ');
}
}  // namespace detail

}  // namespace shardalg
