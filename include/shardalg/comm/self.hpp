// shardalg/comm/self.hpp — the group of one rank. Every collective is the identity (a copy
// where the buffers differ); the layout algebra still runs, so P = 1 is the dense model.
#pragma once

#include <cstdint>
#include <cstring>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg {

class SelfComm {
 public:
  int rank() const { return 0; }
  int size() const { return 1; }
  std::uintptr_t key() const { return 1; }
  static constexpr std::string_view name() { return "SelfComm"; }
  void all_reduce(void*, std::size_t, DType, ReduceOp) {}
  void all_gather(const void* s, void* r, std::size_t n, DType t) { copy(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp) { copy(s, r, n, t); }
  void all_to_all(const void* s, void* r, std::size_t n, DType t) { copy(s, r, n, t); }
  void broadcast(void*, std::size_t, DType, int) {}
  /// The one block goes to itself; the counts must agree (CollectiveMismatchError otherwise).
  void all_to_allv(const void* s, const std::size_t* sc, void* r, const std::size_t* rc, DType t) {
    if (sc[0] != rc[0])
      throw CollectiveMismatchError(detail::cat("SelfComm: mismatched all_to_allv counts: rank 0 expects ", rc[0],
                                                " elements from rank 0, which sends it ", sc[0]));
    copy(s, r, sc[0], t);
  }
  void send(const void*, std::size_t, DType, int peer) { no_peer(peer); }
  void recv(void*, std::size_t, DType, int peer) { no_peer(peer); }
  void barrier() {}
  /// The group of one rank splits into itself.
  [[nodiscard]] SelfComm split(int color, int) const {
    if (color < 0) throw CommError(detail::cat("SelfComm::split: color ", color, " is negative"));
    return {};
  }

 private:
  static void copy(const void* s, void* r, std::size_t n, DType t) {
    if (s != r && n) std::memmove(r, s, n * size_of(t));
  }
  [[noreturn]] static void no_peer(int peer) {
    throw CommError(detail::cat("SelfComm: no peer rank ", peer, " in a group of size 1"));
  }
};

static_assert(Communicator<SelfComm> && VariableAllToAll<SelfComm>);

}  // namespace shardalg
