// shardalg/observe/tally.hpp — the collectives a Ledger recorded, counted per kind: how many, and
// how many bytes.
//
// Bytes are the ledger's: the size V of the dense matrix each collective is about, times the
// element size (observe/ledger.hpp) — so a tally compares directly with the analytic counts of
// cost/transformer.hpp. For a tensor-parallel MLP forward, X[R] · W1[C] → H[C] → G[C] · W2[Row]
// → Z[Partial] → Z[R], in double with T tokens of h:
//
//   tally(ledger, "fwd/mlp") == { all_reduce: 1 call, 8·T·h bytes }
//
// Kinds are keyed by name (to_string(CollectiveKind)), so a tally iterates in the names' order
// (all_gather, all_reduce, all_to_all, …) and equals another when every kind has the same count
// and bytes. Scopes nest with '/' as in Ledger::in_scope: "fwd" holds "fwd/block0/attn".
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/observe/ledger.hpp"

namespace shardalg::verify {

/// One kind's share of a tally.
struct KindTally {
  std::size_t count = 0;
  std::size_t bytes = 0;
  friend bool operator==(const KindTally&, const KindTally&) = default;
};

/// Collectives by kind: count and (dense, ledger-convention) bytes.
class CommTally {
 public:
  using Map = std::map<std::string, KindTally>;

  /// `n` collectives of kind `k`, `bytes` each. Adding none leaves the tally as it was.
  void add(CollectiveKind k, std::size_t bytes, std::size_t n = 1) { add(std::string(to_string(k)), bytes, n); }
  void add(const std::string& kind, std::size_t bytes, std::size_t n = 1) {
    if (n == 0) return;
    auto& e = by_kind_[kind];
    e.count += n;
    e.bytes += bytes * n;
  }
  void add(const LedgerEntry& e) { add(e.kind, e.bytes); }
  CommTally& operator+=(const CommTally& o) {
    for (const auto& [k, v] : o.by_kind_) {
      auto& e = by_kind_[k];
      e.count += v.count;
      e.bytes += v.bytes;
    }
    return *this;
  }

  [[nodiscard]] const Map& by_kind() const { return by_kind_; }
  [[nodiscard]] bool empty() const { return by_kind_.empty(); }
  [[nodiscard]] std::size_t count() const {
    std::size_t n = 0;
    for (const auto& [k, v] : by_kind_) n += v.count;
    return n;
  }
  [[nodiscard]] std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& [k, v] : by_kind_) n += v.bytes;
    return n;
  }
  /// Count and bytes of one kind ({0, 0} when none ran).
  [[nodiscard]] KindTally of(CollectiveKind k) const {
    auto it = by_kind_.find(std::string(to_string(k)));
    return it == by_kind_.end() ? KindTally{} : it->second;
  }

  friend bool operator==(const CommTally&, const CommTally&) = default;

 private:
  Map by_kind_;
};

/// The entries in `scope` (or nested inside it; "" is everything), tallied.
[[nodiscard]] inline CommTally tally(const std::vector<LedgerEntry>& entries, std::string_view scope = "") {
  CommTally t;
  for (const auto& e : entries)
    if (Ledger::in_scope(e.scope, scope)) t.add(e);
  return t;
}
[[nodiscard]] inline CommTally tally(const Ledger& ledger, std::string_view scope = "") {
  return tally(ledger.entries(), scope);
}

/// The entries a predicate selects, tallied: e.g. in "gpt" but not in "gpt/fwd".
template <class Pred>
[[nodiscard]] CommTally tally_if(const std::vector<LedgerEntry>& entries, Pred&& pred) {
  CommTally t;
  for (const auto& e : entries)
    if (pred(e)) t.add(e);
  return t;
}

/// One step's collectives split by pass: `fwd_scope` and `bwd_scope` are tallied separately.
struct PassTally {
  CommTally forward, backward;
  friend bool operator==(const PassTally&, const PassTally&) = default;
};
[[nodiscard]] inline PassTally tally_passes(const Ledger& ledger, std::string_view fwd_scope, std::string_view bwd_scope) {
  return {tally(ledger, fwd_scope), tally(ledger, bwd_scope)};
}

}  // namespace shardalg::verify

namespace shardalg {

/// Bytes this rank sent in halo exchanges and halo reductions that `ledger` recorded under `scope`
/// (its entries of kind halo: Row → Row+halo, or Row+halo → Row for the reduction).
inline std::size_t halo_bytes(const Ledger& ledger, std::string_view scope = "") {
  return ledger.bytes(CollectiveKind::halo, scope);
}

}  // namespace shardalg
