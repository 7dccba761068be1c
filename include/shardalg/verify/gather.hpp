// shardalg/verify/gather.hpp — per-rank measurements brought to every rank, as verification
// traffic: the calls carry CallInfo::verification, so no Ledger records them and the tallies of
// the run being verified stay exact.
//
// gather_doubles: rank r's vector v_r (the same length n on every rank) → [v_0 | v_1 | … ],
// rank r's entry i at r·n + i. gather_strings: rank r's string s_r (any length) → {s_0, s_1, …}
// on rank `root` (the others get an empty vector): the lengths are all-gathered (P integers), the
// strings sent to the root point to point — the root holds Σ|s_r|, every other rank only its own
// (an all-gather padded to the longest string would hold P·max|s_r| on every rank: P² growth).
// Both are collectives: every rank of the group calls them, in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "shardalg/comm/communicator.hpp"

namespace shardalg::verify {

/// The CallInfo of verification traffic: no layouts, not ledgered.
inline constexpr CallInfo kVerification{"-", "-", true};

[[nodiscard]] inline std::vector<double> gather_doubles(Group g, const std::vector<double>& v) {
  std::vector<double> out(v.size() * static_cast<std::size_t>(g.size()));
  if (!v.empty()) g.all_gather(v.data(), out.data(), v.size(), kVerification);
  return out;
}

[[nodiscard]] inline std::vector<std::string> gather_strings(Group g, const std::string& s, int root = 0) {
  std::int64_t len = static_cast<std::int64_t>(s.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(g.size()));
  g.all_gather(&len, lens.data(), 1, kVerification);
  const auto words = [](std::int64_t n) { return static_cast<std::size_t>((n + 3) / 4); };  // as int32 words
  std::vector<std::string> out;
  if (g.rank() != root) {
    std::vector<std::int32_t> mine(words(len), 0);
    if (!s.empty()) std::memcpy(mine.data(), s.data(), s.size());
    if (!mine.empty()) g.send(mine.data(), mine.size(), DType::i32, root, kVerification);
    return out;
  }
  for (int r = 0; r < g.size(); ++r) {
    const std::int64_t n = lens[static_cast<std::size_t>(r)];
    if (r == root) {
      out.push_back(s);
      continue;
    }
    std::vector<std::int32_t> buf(words(n), 0);
    if (!buf.empty()) g.recv(buf.data(), buf.size(), DType::i32, r, kVerification);
    out.emplace_back(reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace shardalg::verify
