// shardalg/verify/gather.hpp — per-rank measurements brought to every rank, as verification
// traffic: the calls carry CallInfo::verification, so no Ledger records them and the tallies of
// the run being verified stay exact.
//
// gather_doubles: rank r's vector v_r (the same length n on every rank) → [v_0 | v_1 | … ],
// rank r's entry i at r·n + i. gather_strings: rank r's string s_r (any length) → {s_0, s_1, …}.
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

[[nodiscard]] inline std::vector<std::string> gather_strings(Group g, const std::string& s) {
  std::int64_t len = static_cast<std::int64_t>(s.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(g.size()));
  g.all_gather(&len, lens.data(), 1, kVerification);
  const std::int64_t mx = *std::max_element(lens.begin(), lens.end());
  const std::size_t words = static_cast<std::size_t>((mx + 3) / 4);  // sent as int32 words
  std::vector<std::int32_t> mine(std::max<std::size_t>(words, 1), 0), all(mine.size() * lens.size());
  std::memcpy(mine.data(), s.data(), s.size());
  g.all_gather(mine.data(), all.data(), mine.size(), kVerification);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lens.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * mine.size()), static_cast<std::size_t>(lens[r]));
  return out;
}

}  // namespace shardalg::verify
