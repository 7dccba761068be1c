// shardalg/comm/mpi.hpp — a Communicator over an MPI communicator (opt-in: needs <mpi.h> and
// the shardalg::mpi target). Wraps the user's MPI_Comm, MPI_COMM_WORLD or a sub-communicator
// from MPI_Comm_split; collectives run in place on the caller's buffers, with no staging copies.
//
// Checked collectives (comm/mpi_check.hpp): the overloads that take a CallInfo — the
// ones Group and the ledger call — and barrier() exchange fingerprints first when
// check_collectives() is on, under the watchdog. The plain overloads (no CallInfo) are unchecked.
// Reproducible mode (set_reproducible(true), or SHARDALG_REPRODUCIBLE=1 in the environment when
// the handle is made): all_reduce and reduce_scatter add in rank order 0, 1, …, P−1, element by
// element, as ThreadComm does, so a run under mpirun gives the bits of the same run on threads
// at any P (MPI's own algorithms add in an order of their choosing: recursive doubling, a ring).
// Each is a reduce-scatter by direct exchange (every rank sends chunk c of its buffer to rank c,
// point to point; rank c adds the P copies of its chunk in rank order as they land), the
// all-reduce then an MPI_Allgatherv: (P−1)/P·V sent per rank for each half, the ring's traffic.
// 16-bit storage (bf16, fp16) travels as its bits (MPI_UINT16_T); MPI has no sum of bf16, so a
// 16-bit all_reduce or reduce_scatter always takes the rank-order path, each add formed in fp32
// and rounded once (comm/reduce.hpp): the thread world's bits, in any mode.
#pragma once

// Only MPI's C API is used; skip the deprecated C++ bindings (and their warnings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/mpi_check.hpp"
#include "shardalg/comm/mpi_p2p.hpp"
#include "shardalg/comm/reduce.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg {

namespace detail {
inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    default: return MPI_SUM;
  }
}
/// MPI_Comm is a pointer in Open MPI and an int in MPICH.
template <class H>
std::uintptr_t handle_key(H h) {
  if constexpr (std::is_pointer_v<H>) return reinterpret_cast<std::uintptr_t>(h);
  else return static_cast<std::uintptr_t>(h);
}
/// ThreadComm's chunk r of n elements over P ranks: the first n mod P chunks one longer.
inline std::pair<std::size_t, std::size_t> rank_chunk(std::size_t n, int P, int r) {
  const std::size_t p = static_cast<std::size_t>(P), base = n / p, extra = n % p, rr = static_cast<std::size_t>(r);
  const std::size_t lo = rr * base + std::min(rr, extra);
  return {lo, lo + base + (rr < extra ? 1 : 0)};
}
/// out[i] := a[i] ∘ b[i]: the first step of detail::accumulate's rank-order fold (acc := a;
/// acc ∘= b), in one pass, with the same arithmetic and comparisons.
template <class T>
void combine2(T* out, const T* a, const T* b, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] < b[i] ? b[i] : a[i];
      break;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) out[i] = b[i] < a[i] ? b[i] : a[i];
      break;
    default:
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
}
/// SHARDALG_REPRODUCIBLE set to anything but "" or "0".
inline bool reproducible_from_env() {
  const char* v = std::getenv("SHARDALG_REPRODUCIBLE");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(detail::cat("MpiComm: ", what, " failed: ", std::string(msg, len)));
}
}  // namespace detail

class MpiComm {
 public:
  /// Wrap a communicator the caller owns (it must outlive this handle and its copies).
  /// Reproducible mode starts on when SHARDALG_REPRODUCIBLE is set (not "0").
  explicit MpiComm(MPI_Comm comm) : comm_(std::make_shared<MPI_Comm>(comm)), reproducible_(detail::reproducible_from_env()) {
    detail::mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  }

  /// MPI_Comm_split: a sub-communicator owned by the returned handle (freed with its last copy).
  [[nodiscard]] MpiComm split(int color, int key) const {
    MPI_Comm sub;
    detail::mpi_check(MPI_Comm_split(*comm_, color, key, &sub), "MPI_Comm_split");
    MpiComm out(std::shared_ptr<MPI_Comm>(new MPI_Comm(sub), [](MPI_Comm* c) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(c);
      delete c;
    }));
    out.reproducible_ = reproducible_;  // the mode is inherited
    return out;
  }

  /// Reproducible mode: all_reduce and reduce_scatter (any ReduceOp) combine in rank order
  /// 0, 1, …, P−1 with ThreadComm's arithmetic, so their results are bitwise those of
  /// ThreadComm's at the same P; iall_reduce then runs the blocking one (async_all_reduce()
  /// says false). Set it on the handle before wrapping it in a Group; copies and split() keep it.
  void set_reproducible(bool on) { reproducible_ = on; }
  [[nodiscard]] bool reproducible() const { return reproducible_; }
  /// Whether iall_reduce returns before the all-reduce completes (not in reproducible mode).
  [[nodiscard]] bool async_all_reduce() const { return !reproducible_; }

  [[nodiscard]] MPI_Comm native() const { return *comm_; }

  /// How many ranks of this communicator share this rank's node (MPI_COMM_TYPE_SHARED), for
  /// set_local_threads(local_threads_for(ranks_on_node())).
  [[nodiscard]] int ranks_on_node() const {
    MPI_Comm node;
    detail::mpi_check(MPI_Comm_split_type(*comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
                      "MPI_Comm_split_type");
    int n = 1;
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    return n;
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The MPI handle itself: two wrappers of one communicator are the same group.
  std::uintptr_t key() const { return detail::handle_key(*comm_); }
  static constexpr std::string_view name() { return "MpiComm"; }

  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    if (ordered(t)) {
      dispatch_host(t, [&]<class T>() { ordered_all_reduce(static_cast<T*>(buf), n, op); });
      return;
    }
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, count(n), detail::mpi_type(t), detail::mpi_op(op), *comm_),
                      "MPI_Allreduce");
  }
  /// MPI_Iallreduce in place. Open MPI progresses it inside MPI calls: the Request's test()
  /// is where the work happens when no progress thread or offloading network does it.
  [[nodiscard]] Request iall_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    if (ordered(t)) {  // the ordered sum is blocking: a completed Request
      all_reduce(buf, n, t, op);
      return {};
    }
    MpiCollectiveRequest r;
    detail::mpi_check(
        MPI_Iallreduce(MPI_IN_PLACE, buf, count(n), detail::mpi_type(t), detail::mpi_op(op), *comm_, &r.req),
        "MPI_Iallreduce");
    return Request(r);
  }
  void all_gather(const void* send, void* recv, std::size_t n, DType t) {
    const auto ty = detail::mpi_type(t);
    const void* in_place = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * n * size_of(t);
    detail::mpi_check(MPI_Allgather(send == in_place ? MPI_IN_PLACE : send, count(n), ty, recv, count(n), ty, *comm_),
                      "MPI_Allgather");
  }
  /// Which reduce-scatter to run. Open MPI 4.1's MPI_Reduce_scatter_block is 2–4× slower than
  /// an all-reduce of the same buffer on one node (bench/collectives), so the default is a ring
  /// over MPI_Sendrecv: P−1 steps, each moving one block of n, (P−1)/P·V per rank in all.
  enum class ReduceScatterAlgorithm { ring, native };
  void set_reduce_scatter_algorithm(ReduceScatterAlgorithm a) { rs_algo_ = a; }

  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op) {
    if (ordered(t)) {
      dispatch_host(t, [&]<class T>() { ordered_reduce_scatter(static_cast<const T*>(send), static_cast<T*>(recv), n, op); });
      return;
    }
    if (rs_algo_ == ReduceScatterAlgorithm::native || size_ == 1 || n == 0) {
      detail::mpi_check(MPI_Reduce_scatter_block(send, recv, count(n), detail::mpi_type(t), detail::mpi_op(op), *comm_),
                        "MPI_Reduce_scatter_block");
      return;
    }
    dispatch_host(t, [&]<class T>() { ring_reduce_scatter(static_cast<const T*>(send), static_cast<T*>(recv), n, op); });
  }
  void all_to_all(const void* send, void* recv, std::size_t n, DType t) {
    const auto ty = detail::mpi_type(t);
    detail::mpi_check(MPI_Alltoall(send, count(n), ty, recv, count(n), ty, *comm_), "MPI_Alltoall");
  }
  /// MPI_Alltoallv with displacements = prefix sums of the counts (elements, per peer).
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t) {
    const auto ty = detail::mpi_type(t);
    std::vector<int> sc(static_cast<std::size_t>(size_)), sd(sc.size()), rc(sc.size()), rd(sc.size());
    std::size_t so = 0, ro = 0;
    for (std::size_t s = 0; s < sc.size(); ++s) {
      sc[s] = count(send_counts[s]);
      sd[s] = count(so);
      rc[s] = count(recv_counts[s]);
      rd[s] = count(ro);
      so += send_counts[s];
      ro += recv_counts[s];
    }
    detail::mpi_check(MPI_Alltoallv(send, sc.data(), sd.data(), ty, recv, rc.data(), rd.data(), ty, *comm_),
                      "MPI_Alltoallv");
  }
  void broadcast(void* buf, std::size_t n, DType t, int root) {
    detail::mpi_check(MPI_Bcast(buf, count(n), detail::mpi_type(t), root, *comm_), "MPI_Bcast");
  }
  void send(const void* buf, std::size_t n, DType t, int peer) {
    detail::mpi_check(MPI_Send(buf, count(n), detail::mpi_type(t), peer, 0, *comm_), "MPI_Send");
  }
  void recv(void* buf, std::size_t n, DType t, int peer) {
    detail::mpi_check(MPI_Recv(buf, count(n), detail::mpi_type(t), peer, 0, *comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  /// MPI_Isend / MPI_Irecv (tag 0, as send/recv: they match each other).
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer) {
    detail::MpiRequest r;
    detail::mpi_check(MPI_Isend(buf, count(n), detail::mpi_type(t), peer, 0, *comm_, &r.req), "MPI_Isend");
    return Request(r);
  }
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer) {
    detail::MpiRequest r;
    r.is_recv = true;
    detail::mpi_check(MPI_Irecv(buf, count(n), detail::mpi_type(t), peer, 0, *comm_, &r.req), "MPI_Irecv");
    return Request(r);
  }
  void barrier() {
    check_call(detail::CheckedOp::barrier, 0, DType::f64, {});
    detail::mpi_check(MPI_Barrier(*comm_), "MPI_Barrier");
  }

  // ---- Checked collectives: with check_collectives() on, the ranks' fingerprints
  // are exchanged and compared, under the watchdog, before the collective itself runs
  // (comm/mpi_check.hpp). Group and the ledger call these overloads; the ones above are unchecked.
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info) {
    check_call(detail::CheckedOp::all_reduce, n, t, info, op);
    all_reduce(buf, n, t, op);
  }
  [[nodiscard]] Request iall_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info) {
    check_call(detail::CheckedOp::iall_reduce, n, t, info, op);
    return iall_reduce(buf, n, t, op);
  }
  void all_gather(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info) {
    check_call(detail::CheckedOp::all_gather, n, t, info);
    all_gather(send, recv, n, t);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op, const CallInfo& info) {
    check_call(detail::CheckedOp::reduce_scatter, n, t, info, op);
    reduce_scatter(send, recv, n, t, op);
  }
  void all_to_all(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info) {
    check_call(detail::CheckedOp::all_to_all, n, t, info);
    all_to_all(send, recv, n, t);
  }
  void broadcast(void* buf, std::size_t n, DType t, int root, const CallInfo& info) {
    check_call(detail::CheckedOp::broadcast, n, t, info, ReduceOp::sum, root);
    broadcast(buf, n, t, root);
  }
  // Point to point, checked: a header with the message's description before the data, compared
  // by the receive, and the watchdog on every wait (comm/mpi_p2p.hpp). Unchecked: the plain calls.
  void send(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info) {
    if (!check_collectives()) return send(buf, n, t, peer);
    isend(buf, n, t, peer, info).wait();
  }
  void recv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info) {
    if (!check_collectives()) return recv(buf, n, t, peer);
    irecv(buf, n, t, peer, info).wait();
  }
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info) {
    if (!check_collectives()) return isend(buf, n, t, peer);
    detail::MessageRecord rec(t, n, info);
    rec.seq = detail::next_p2p_seq(key(), peer);
    return Request(detail::MpiCheckedSend::start(*comm_, rank_, buf, count(n), detail::mpi_type(t), peer, rec));
  }
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info) {
    if (!check_collectives()) return irecv(buf, n, t, peer);
    return Request(detail::MpiCheckedRecv::start(*comm_, rank_, buf, count(n), detail::mpi_type(t), peer,
                                                 detail::MessageRecord(t, n, info)));
  }
  /// Checked: the fingerprints (the count is this rank's Σ send_counts, not compared), then every
  /// rank's two count arrays gathered (an MPI_Allgather of 2·P values, verification traffic) and
  /// compared pair by pair: recv_counts[s] on rank r must be send_counts[r] on rank s, else
  /// CollectiveMismatchError on every rank, the same text, before any data moves.
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t, const CallInfo& info) {
    std::size_t total = 0;
    for (int s = 0; s < size_; ++s) total += send_counts[s];
    check_call(detail::CheckedOp::all_to_allv, total, t, info);
    if (check_collectives() && size_ > 1) {
      const auto P = static_cast<std::size_t>(size_);
      std::vector<std::uint64_t> mine(2 * P), all(2 * P * P);
      for (std::size_t s = 0; s < P; ++s) {
        mine[s] = send_counts[s];
        mine[P + s] = recv_counts[s];
      }
      detail::mpi_check(MPI_Allgather(mine.data(), static_cast<int>(2 * P), MPI_UINT64_T, all.data(),
                                      static_cast<int>(2 * P), MPI_UINT64_T, *comm_),
                        "MPI_Allgather");
      std::string msg = detail::all_to_allv_mismatch(
          "MpiComm", size_, [&](int s, int r) { return all[static_cast<std::size_t>(s) * 2 * P + static_cast<std::size_t>(r)]; },
          [&](int r, int s) { return all[static_cast<std::size_t>(r) * 2 * P + P + static_cast<std::size_t>(s)]; });
      if (!msg.empty()) throw CollectiveMismatchError(std::move(msg));
    }
    all_to_allv(send, send_counts, recv, recv_counts, t);
  }

 private:
  // iall_reduce's Request. A nonblocking collective cannot be cancelled or freed (MPI forbids
  // both): destroyed while an exception unwinds, it is left to MPI — the rank is failing, and
  // run_mpi ends the job; destroyed normally, it is waited for.
  struct MpiCollectiveRequest {
    MPI_Request req = MPI_REQUEST_NULL;
    bool test() {
      int flag = 0;
      detail::mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      return flag != 0;
    }
    void wait() { detail::mpi_check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait"); }
    void cancel() noexcept {}
    void dropped(const std::exception_ptr& e) noexcept { detail::abort_dropped(e); }
  };

  explicit MpiComm(std::shared_ptr<MPI_Comm> owned) : comm_(std::move(owned)) {
    detail::mpi_check(MPI_Comm_rank(*comm_, &rank_), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(*comm_, &size_), "MPI_Comm_size");
  }
  // The partial sum of block k starts at rank k+1 and travels k+1 → k+2 → … → k, each rank
  // adding its own contribution: at step s rank r receives the partial of block (r − 2 − s) mod P
  // from rank r−1, adds send[block], and forwards it at step s+1; after P−1 steps rank r holds
  // block r in full. Working memory: the output block and one more block (no staging copy of V).
  // Each step posts its block as L2-sized segments, all at once (their handshakes overlap), and
  // adds each segment as soon as it lands, while it is still in cache.
  template <class T>
  void ring_reduce_scatter(const T* send, T* out, std::size_t n, ReduceOp op) {
    const int P = size_, r = rank_, next = (r + 1) % P, prev = (r + P - 1) % P;
    const auto block = [&](int k) { return send + static_cast<std::size_t>(((k % P) + P) % P) * n; };
    const auto ty = detail::mpi_type(dtype_of<T>);
    constexpr std::size_t segment = (256u << 10) / sizeof(T);
    // A second buffer only when there is a middle step (P > 2); never zero-filled.
    std::unique_ptr<T[]> tmp(P > 2 ? new T[n] : nullptr);
    const T* outgoing = block(r - 1);  // step 0: my own contribution to block r−1
    for (int s = 0; s < P - 1; ++s) {
      // Alternate out/tmp so that consecutive steps never send from the buffer they receive
      // into, and the last step (s = P−2) receives into out.
      T* incoming = (P - 2 - s) % 2 == 0 ? out : tmp.get();
      const T* mine = block(r - 2 - s);
      // Post every segment at once (the handshakes overlap), then add each segment as it lands.
      const std::size_t nseg = (n + segment - 1) / segment;
      std::vector<MPI_Request> recvs(nseg), sends(nseg);
      for (std::size_t j = 0; j < nseg; ++j) {
        const std::size_t o = j * segment, len = std::min(segment, n - o);
        detail::mpi_check(MPI_Irecv(incoming + o, count(len), ty, prev, 1, *comm_, &recvs[j]), "MPI_Irecv");
        detail::mpi_check(MPI_Isend(outgoing + o, count(len), ty, next, 1, *comm_, &sends[j]), "MPI_Isend");
      }
      for (std::size_t j = 0; j < nseg; ++j) {
        const std::size_t o = j * segment, len = std::min(segment, n - o);
        detail::mpi_check(MPI_Wait(&recvs[j], MPI_STATUS_IGNORE), "MPI_Wait");
        detail::accumulate(incoming + o, mine + o, len, op);
      }
      detail::mpi_check(MPI_Waitall(static_cast<int>(nseg), sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      outgoing = incoming;
    }
  }

  // ---- reproducible mode
  // Rank c gets [off[c], off[c] + len[c]) of every rank's `send` and writes into out[0, len[c])
  // their combination in rank order, out := x_0 ∘ x_1 ∘ … ∘ x_{P−1} from the left, with
  // ThreadComm's arithmetic (detail::accumulate; the first two fused into one pass). The
  // exchange is point to point in rounds of at most kOrderedBytes landing per rank (bounded
  // memory): each round posts every receive and send at once, reads this rank's own part in
  // place, and adds each peer's part as soon as it has landed, in rank order. `out` may alias
  // this rank's own part of `send` (the in-place all-reduce; reduce_scatter's recv = send +
  // rank·n): that segment is then copied aside before it is overwritten.
  static constexpr std::size_t kOrderedBytes = 4u << 20;
  static constexpr int kOrderedTag = 2;
  template <class T>
  void ordered_exchange_sum(const T* send, const std::vector<std::size_t>& off, const std::vector<std::size_t>& len,
                            T* out, ReduceOp op) {
    const int P = size_, r = rank_;
    const auto ty = detail::mpi_type(dtype_of<T>);
    const std::size_t seg = std::max<std::size_t>(1, kOrderedBytes / sizeof(T) / static_cast<std::size_t>(P));
    const std::size_t longest = *std::max_element(len.begin(), len.end());
    const std::size_t mine_len = len[static_cast<std::size_t>(r)];
    const std::size_t slot = std::max<std::size_t>(1, std::min(seg, mine_len));
    std::unique_ptr<T[]> in(new T[static_cast<std::size_t>(P) * slot]);
    std::vector<MPI_Request> rq(P, MPI_REQUEST_NULL), sq(P, MPI_REQUEST_NULL);
    for (std::size_t o = 0; o < longest; o += seg) {  // the same rounds on every rank
      const std::size_t m = o < mine_len ? std::min(seg, mine_len - o) : 0;
      for (int s = 0; s < P; ++s)
        if (s != r && m > 0)
          detail::mpi_check(MPI_Irecv(in.get() + static_cast<std::size_t>(s) * slot, count(m), ty, s, kOrderedTag,
                                      *comm_, &rq[s]),
                            "MPI_Irecv");
      for (int c = 0; c < P; ++c) {
        const auto cc = static_cast<std::size_t>(c);
        if (c == r || o >= len[cc]) continue;
        detail::mpi_check(MPI_Isend(send + off[cc] + o, count(std::min(seg, len[cc] - o)), ty, c, kOrderedTag, *comm_,
                                    &sq[c]),
                          "MPI_Isend");
      }
      if (m > 0) {
        T* dst = out + o;
        const T* own = send + off[static_cast<std::size_t>(r)] + o;
        const auto at = [](const T* p) { return reinterpret_cast<std::uintptr_t>(p); };
        if (at(own) < at(dst + m) && at(dst) < at(own + m)) {  // in place: keep my part
          T* aside = in.get() + static_cast<std::size_t>(r) * slot;
          std::copy_n(own, m, aside);
          own = aside;
        }
        const auto part = [&](int s) -> const T* {
          if (s == r) return own;
          detail::mpi_check(MPI_Wait(&rq[s], MPI_STATUS_IGNORE), "MPI_Wait");
          return in.get() + static_cast<std::size_t>(s) * slot;
        };
        const T* x0 = part(0);
        detail::combine2(dst, x0, part(1), m, op);
        for (int s = 2; s < P; ++s) detail::accumulate(dst, part(s), m, op);
      }
      detail::mpi_check(MPI_Waitall(P, sq.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
  }
  // buf[n] := Σ_ranks buf[n] in rank order: rank r sums ThreadComm's chunk r, then MPI_Allgatherv.
  template <class T>
  void ordered_all_reduce(T* buf, std::size_t n, ReduceOp op) {
    if (n == 0) return;
    const int P = size_;
    std::vector<std::size_t> off(P), len(P);
    std::vector<int> cnt(P), displ(P);
    for (int c = 0; c < P; ++c) {
      const auto [lo, hi] = detail::rank_chunk(n, P, c);
      off[c] = lo;
      len[c] = hi - lo;
      cnt[c] = count(hi - lo);
      displ[c] = count(lo);
    }
    ordered_exchange_sum<T>(buf, off, len, buf + off[rank_], op);
    const auto ty = detail::mpi_type(dtype_of<T>);
    detail::mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt.data(), displ.data(), ty, *comm_),
                      "MPI_Allgatherv");
  }
  // recv[n] := Σ_ranks send[rank·n, rank·n + n) in rank order.
  template <class T>
  void ordered_reduce_scatter(const T* send, T* recv, std::size_t n, ReduceOp op) {
    if (n == 0) return;
    const int P = size_;
    std::vector<std::size_t> off(P), len(P, n);
    for (int c = 0; c < P; ++c) off[c] = static_cast<std::size_t>(c) * n;
    ordered_exchange_sum<T>(send, off, len, recv, op);
  }

  static int count(std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw CommError(detail::cat("MpiComm: count ", n, " exceeds MPI's int limit"));
    return static_cast<int>(n);
  }

  void check_call(detail::CheckedOp op, std::size_t n, DType t, const CallInfo& info, ReduceOp r = ReduceOp::sum,
                  int root = -1) {
    if (!check_collectives()) return;
    detail::mpi_check_collective(*comm_, rank_, size_,
                                 detail::Fingerprint::make(op, n, t, info, ++check_->seq, r, root));
  }

  std::shared_ptr<MPI_Comm> comm_;
  std::shared_ptr<detail::MpiCheckState> check_ = std::make_shared<detail::MpiCheckState>();
  int rank_ = 0, size_ = 1;
  ReduceScatterAlgorithm rs_algo_ = ReduceScatterAlgorithm::ring;
  bool reproducible_ = false;
  /// A sum that adds in rank order on the host: reproducible mode, or 16-bit elements.
  [[nodiscard]] bool ordered(DType t) const { return size_ > 1 && (reproducible_ || t == DType::bf16 || t == DType::f16); }
};

static_assert(Communicator<MpiComm> && AsyncAllReduce<MpiComm> && InfoAwareCommunicator<MpiComm> &&
              VariableAllToAll<MpiComm> && AsyncPointToPoint<MpiComm>);

}  // namespace shardalg
