// shardalg/comm/collective_check.hpp — the fingerprint of a checked collective, shared
// by the backends that check (ThreadComm, MpiComm). The switch and the watchdog's limit are in
// base/checks.hpp.
//
// A fingerprint is what the ranks must agree on before data moves: the kind, the dtype, the
// element count n (per rank, as the backend's call takes it), the reduce op (reductions only),
// the root (broadcast only), the layouts of the CallInfo and the sequence number (checked
// collectives of this group counted on this rank, from 1). The ledger's scope label is carried
// for the text only. Its text, as the errors quote it:
//
//   all_reduce f64 × 8 (#3, mlp.fwd)               all_reduce(max) f32 × 2 Partial → R (#1)
//   broadcast f64 × 8 from rank 1 (#2)             barrier (#4)
//   the end of its run_ranks body (#5)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardalg/base/linkage.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/base/checks.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg::detail {

enum class CheckedOp : std::uint8_t {
  none,  // not in a checked collective yet
  all_reduce,
  iall_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  barrier,
  end_of_body,  // ThreadComm: the rank returned from run_ranks' body
  all_to_allv,  // count: the elements this rank sends (they differ by rank: not compared)
};

constexpr std::string_view to_string(CheckedOp k) {
  switch (k) {
    case CheckedOp::none: return "none";
    case CheckedOp::all_reduce: return "all_reduce";
    case CheckedOp::iall_reduce: return "iall_reduce";
    case CheckedOp::all_gather: return "all_gather";
    case CheckedOp::reduce_scatter: return "reduce_scatter";
    case CheckedOp::all_to_all: return "all_to_all";
    case CheckedOp::broadcast: return "broadcast";
    case CheckedOp::barrier: return "barrier";
    case CheckedOp::end_of_body: return "the end of its run_ranks body";
    case CheckedOp::all_to_allv: return "all_to_allv";
  }
  return "?";
}

struct Fingerprint {
  CheckedOp op = CheckedOp::none;
  DType dtype = DType::f64;
  ReduceOp reduce = ReduceOp::sum;
  int root = -1;
  std::size_t count = 0;
  std::uint64_t seq = 0;
  std::string_view layout_in = "-", layout_out = "-", scope = {};

  static Fingerprint make(CheckedOp op, std::size_t n, DType t, const CallInfo& i, std::uint64_t seq,
                          ReduceOp r = ReduceOp::sum, int root = -1) {
    return {op, t, r, root, n, seq, i.layout_in, i.layout_out, i.scope};
  }
  [[nodiscard]] bool moves_data() const {
    return op != CheckedOp::none && op != CheckedOp::barrier && op != CheckedOp::end_of_body;
  }
  [[nodiscard]] bool reduces() const {
    return op == CheckedOp::all_reduce || op == CheckedOp::iall_reduce || op == CheckedOp::reduce_scatter;
  }
};

/// Whether two ranks' fingerprints describe the same call (the scope is not compared).
inline bool same_call(const Fingerprint& a, const Fingerprint& b) {
  if (a.op != b.op || a.seq != b.seq) return false;
  if (!a.moves_data()) return true;
  return a.dtype == b.dtype && (a.count == b.count || a.op == CheckedOp::all_to_allv) &&
         (!a.reduces() || a.reduce == b.reduce) &&
         (a.op != CheckedOp::broadcast || a.root == b.root) && a.layout_in == b.layout_in &&
         a.layout_out == b.layout_out;
}

/// "all_reduce f64 × 8 (#3, mlp.fwd)".
SHARDALG_FUNC std::string describe(const Fingerprint& f);
#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp
SHARDALG_FUNC std::string describe(const Fingerprint& f) {
  if (f.op == CheckedOp::none) return "none";
  std::string s(to_string(f.op));
  if (f.moves_data()) {
    if (f.reduces() && f.reduce != ReduceOp::sum) s += f.reduce == ReduceOp::max ? "(max)" : "(min)";
    s += cat(" ", to_string(f.dtype), " × ", f.count);
    if (f.op == CheckedOp::broadcast) s += cat(" from rank ", f.root);
    if (f.layout_in != "-" || f.layout_out != "-") s += cat(" ", f.layout_in, " → ", f.layout_out);
  }
  s += cat(" (#", f.seq);
  if (!f.scope.empty()) s += cat(", ", f.scope);
  return s + ")";
}
#endif

/// A fingerprint stored by value: fixed size, trivially copyable, no pointers (the strings are
/// copied, truncated to 23, 23 and 79 bytes). ThreadComm's slots hold these (a peer may read a
/// slot after the call that wrote it has returned), and MpiComm sends them as they are.
struct FingerprintRecord {
  std::uint8_t op = 0, dtype = 0, reduce = 0, pad = 0;
  std::int32_t root = -1;
  std::uint64_t count = 0, seq = 0;
  char layout_in[24] = {}, layout_out[24] = {}, scope[80] = {};

  FingerprintRecord() = default;
  explicit FingerprintRecord(const Fingerprint& f)
      : op(static_cast<std::uint8_t>(f.op)),
        dtype(static_cast<std::uint8_t>(f.dtype)),
        reduce(static_cast<std::uint8_t>(f.reduce)),
        root(f.root),
        count(f.count),
        seq(f.seq) {
    put(layout_in, sizeof layout_in, f.layout_in);
    put(layout_out, sizeof layout_out, f.layout_out);
    put(scope, sizeof scope, f.scope);
  }
  /// A view of this record (the strings point into it).
  [[nodiscard]] Fingerprint view() const {
    return {static_cast<CheckedOp>(op), static_cast<DType>(dtype), static_cast<ReduceOp>(reduce), root,
            static_cast<std::size_t>(count), seq, layout_in, layout_out, scope};
  }

 private:
  static void put(char* dst, std::size_t cap, std::string_view s) {
    const std::size_t k = std::min(cap - 1, s.size());
    if (k != 0) std::memcpy(dst, s.data(), k);  // an empty string_view's data() may be null
    std::memset(dst + k, 0, cap - k);
  }
};
static_assert(sizeof(FingerprintRecord) == 152);

/// "" when the ranks' fingerprints agree, else the CollectiveMismatchError's text naming rank 0's
/// and the first differing rank's: "<who>: mismatched collectives: rank 0: …; rank 2: …".
/// `at(r)` is rank r's FingerprintRecord.
template <class At>
std::string mismatch_text(std::string_view who, int size, At&& at) {
  const Fingerprint f0 = at(0).view();
  for (int r = 1; r < size; ++r) {
    const Fingerprint fr = at(r).view();
    if (!same_call(f0, fr))
      return cat(who, ": mismatched collectives: rank 0: ", describe(f0), "; rank ", r, ": ", describe(fr));
  }
  return {};
}

/// all_to_allv's pairing: rank r receives recv(r, s) elements from rank s, which sends it
/// send(s, r). "" when every pair agrees, else the text every rank raises, naming the first pair
/// in (receiver, sender) order: "<who>: mismatched all_to_allv counts: rank 1 expects 3 elements
/// from rank 0, which sends it 4".
template <class Send, class Recv>
std::string all_to_allv_mismatch(std::string_view who, int size, Send&& send, Recv&& recv) {
  for (int r = 0; r < size; ++r)
    for (int s = 0; s < size; ++s)
      if (recv(r, s) != send(s, r))
        return cat(who, ": mismatched all_to_allv counts: rank ", r, " expects ", recv(r, s), " elements from rank ", s,
                   ", which sends it ", send(s, r));
  return {};
}

/// The watchdog's limit as the errors print it ("0.5 s").
inline std::string timeout_text(double seconds) { return cat(seconds, " s"); }

}  // namespace shardalg::detail
