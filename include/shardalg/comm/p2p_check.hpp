// shardalg/comm/p2p_check.hpp — what a point-to-point message is, beyond its bytes, and the
// receive's comparison with it (shared by ThreadComm and MpiComm).
//
// A send and the receive it matches must agree on the dtype and the element count; on the layout
// and the global shape when both sides say them (CallInfo::layout_in, CallInfo::dims; "-" and −1
// say nothing). Equal byte counts are not enough: 3 int64 read as 3 doubles, or a (seq 8,
// batch 1) activation read as (seq 4, batch 2), move the same bytes and mean something else.
//
//   ThreadComm   always: the sender leaves its record in the mailbox (no traffic); the receive
//                compares before it copies.
//   MpiComm      in checked mode: the record travels as a header message before the data
//                (comm/mpi_p2p.hpp); the receive posts its data receive only once it agrees.
//
// A disagreement is a CollectiveMismatchError raised by the receiving rank, before any data
// lands in its buffer:
//   "ThreadComm: mismatched point-to-point: rank 1 receives f64 × 128, layout R, shape (4, 2, 16)
//    from rank 0, which sent f64 × 128, layout R, shape (8, 1, 16)"
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "shardalg/base/linkage.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/comm/communicator.hpp"

namespace shardalg::detail {

/// A message's description, stored by value (trivially copyable, fixed size: MpiComm sends it as
/// it is). `seq`: MpiComm's number of the message on its (sender, receiver) pair.
struct MessageRecord {
  std::uint8_t dtype = 0;
  std::uint8_t pad[7] = {};
  std::uint64_t count = 0;
  std::uint64_t seq = 0;
  std::int64_t dims[3] = {-1, -1, -1};
  char layout[24] = {};

  MessageRecord() = default;
  MessageRecord(DType t, std::size_t n, const CallInfo& info)
      : dtype(static_cast<std::uint8_t>(t)), count(static_cast<std::uint64_t>(n)) {
    for (int i = 0; i < 3; ++i) dims[i] = info.dims[static_cast<std::size_t>(i)];
    const std::string_view l = info.layout_in;
    const std::size_t k = std::min(sizeof layout - 1, l.size());
    if (k != 0) std::memcpy(layout, l.data(), k);
  }
  [[nodiscard]] std::string_view layout_view() const { return std::string_view(layout); }
  [[nodiscard]] bool has_layout() const { return layout[0] != 0 && layout_view() != "-"; }
  [[nodiscard]] bool has_dims() const { return dims[0] >= 0 || dims[1] >= 0 || dims[2] >= 0; }
};

static_assert(sizeof(MessageRecord) == 72, "MpiComm sends the record as 72 bytes");

/// "f64 × 128, layout R, shape (4, 2, 16)".
SHARDALG_FUNC std::string describe(const MessageRecord& m);
#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp
SHARDALG_FUNC std::string describe(const MessageRecord& m) {
  std::string s = cat(to_string(static_cast<DType>(m.dtype)), " × ", m.count);
  if (m.has_layout()) s += cat(", layout ", m.layout_view());
  if (m.has_dims()) s += cat(", shape (", m.dims[0], ", ", m.dims[1], ", ", m.dims[2], ")");
  return s;
}
#endif

/// Whether the message `got` may land in the receive `want` (see the top of the file).
inline bool same_message(const MessageRecord& want, const MessageRecord& got) {
  if (want.dtype != got.dtype || want.count != got.count) return false;
  if (want.has_layout() && got.has_layout() && want.layout_view() != got.layout_view()) return false;
  if (want.has_dims() && got.has_dims())
    for (int i = 0; i < 3; ++i)
      if (want.dims[i] != got.dims[i]) return false;
  return true;
}

/// "" when they agree, else the CollectiveMismatchError's text (the receiver `dst` speaking).
inline std::string message_mismatch(std::string_view who, int dst, int src, const MessageRecord& want,
                                    const MessageRecord& got) {
  if (same_message(want, got)) return {};
  return cat(who, ": mismatched point-to-point: rank ", dst, " receives ", describe(want), " from rank ", src,
             ", which sent ", describe(got));
}

}  // namespace shardalg::detail
