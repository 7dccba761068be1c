// shardalg/comm/thread.hpp — N simulated ranks in one process, one thread each.
//
// BasicThreadComm<Ops> is the protocol, written once; `Ops` moves the data. ThreadComm is it on
// host memory (HostOps: memcpy and rank-ordered loops); the simulated world of comm/sim_world.hpp
// is it with another device's copies and reductions (one GPU's streams: backend/cuda/sim_comm.hpp).
// An Ops provides
//   copy(dst, src, bytes)                        a copy (either may be a peer's buffer)
//   reduce(ndst, dst, nsrc, src, n, dtype, op)   dst(k)[i] := src(0)[i] ⊕ … ⊕ src(nsrc−1)[i] for every k,
//                                                in rank order (dst(k), src(s): pointers)
//   fence()                                      this rank's copies and reductions are complete
//   stage(bytes), release(p) (static)            the buffer of a message sent before its receive
//   name                                         "ThreadComm", "SimComm": the prefix of every message
//
//   run_ranks(4, [&](ThreadComm& comm) { ... });   // comm/run_ranks.hpp: the body runs on 4 threads, ranks 0..3
//
// The default for tests, examples and teaching. Collectives use the single address space: every
// rank publishes its buffer pointers, then reads the others' memory directly; nothing is copied
// through a transport. Reductions add in rank order 0, 1, …, P−1 on every rank, so all ranks get
// bit-identical results (the property a replicated value needs).
//
// If one rank throws, the world is aborted: ranks waiting in a collective get a CommAbortedError
// (a CommError), and run_ranks rethrows the first rank's own exception once every thread has
// ended — a CommError too when that is what the failing rank threw (only the bystanders' aborts
// are passed over). A thread that cannot be started is a ThreadStartError, not std::terminate.
//
// Structural safety, checked or not: at the rendezvous every rank publishes the kind of its
// collective and its block's size in bytes; when they differ (counts 8 and 6, f64 and f32,
// all_gather and all_to_all) every rank raises CollectiveMismatchError before reading a peer's
// buffer — never a read or write past one.
//
// Checked mode (base/checks.hpp, comm/collective_check.hpp): each rank also writes its
// fingerprint into a slot of shared memory as it enters the rendezvous; once all have arrived,
// every rank compares them and raises CollectiveMismatchError naming both sides before any data
// moves. barrier() takes part like any collective, and the end of run_ranks' body is one too
// ("the end of its run_ranks body"), so a rank that skips a collective is a mismatch, not a hang.
// The watchdog: a rank that waits at the rendezvous (or in recv) longer than collective_timeout()
// raises CollectiveTimeoutError naming what every rank is in; the world is aborted then.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "shardalg/comm/collective_check.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/reduce.hpp"
#include "shardalg/comm/thread_world.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/threads.hpp"

namespace shardalg {

/// Host memory: memcpy, and the reductions tile by tile so that the running sum stays in L1
/// (each element read once per source, written once per destination).
struct HostOps {
  static constexpr std::string_view name = "ThreadComm";
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
  template <class Dst, class Src>
  void reduce(int ndst, Dst&& dst, int nsrc, Src&& src, std::size_t n, DType t, ReduceOp op) {
    const auto typed = [&]<class T>() {
      constexpr std::size_t tile = detail::reduce_tile_bytes / sizeof(T);
      T acc[tile];
      for (std::size_t t0 = 0; t0 < n; t0 += tile) {  // a destination may alias its source
        const std::size_t len = std::min(tile, n - t0);
        std::copy_n(static_cast<const T*>(src(0)) + t0, len, acc);
        for (int s = 1; s < nsrc; ++s) detail::accumulate(acc, static_cast<const T*>(src(s)) + t0, len, op);
        for (int k = 0; k < ndst; ++k) std::copy_n(acc, len, static_cast<T*>(dst(k)) + t0);
      }
    };
    if (!is_bound(t)) return dispatch_host(t, typed);
    // A running bound's partials (precision/element.hpp) add in the same rank order, as bytes.
    const auto extra = detail::extra_accumulate();
    if (!extra)
      throw std::invalid_argument(std::string("ThreadComm: ") + std::string(to_string(t)) +
                                  " needs shardalg/precision/element.hpp included");
    const std::size_t es = size_of(t), tile = detail::reduce_tile_bytes / es;
    alignas(8) unsigned char acc[detail::reduce_tile_bytes];
    for (std::size_t t0 = 0; t0 < n; t0 += tile) {
      const std::size_t len = std::min(tile, n - t0);
      std::memcpy(acc, static_cast<const char*>(src(0)) + t0 * es, len * es);
      for (int s = 1; s < nsrc; ++s) extra(acc, static_cast<const char*>(src(s)) + t0 * es, len, t, op);
      for (int k = 0; k < ndst; ++k) std::memcpy(static_cast<char*>(dst(k)) + t0 * es, acc, len * es);
    }
  }
  void fence() {}
  void* stage(std::size_t bytes) { return ::operator new(bytes ? bytes : 1); }
  static void release(void* p) { ::operator delete(p); }
};

/// One rank's handle on a thread world. Cheap to copy.
///
/// Each collective also takes a CallInfo (the ledger passes its layouts and scope on): with
/// checked collectives on (base/checks.hpp) they are part of the fingerprint the ranks compare.
template <class Ops>
class BasicThreadComm {
 public:
  /// Rank `rank` of world `w`, moving data with `ops` (shared by the rank's sub-group handles).
  BasicThreadComm(std::shared_ptr<detail::ThreadWorld> w, int rank, std::shared_ptr<Ops> ops = default_ops())
      : w_(std::move(w)), ops_(std::move(ops)), rank_(rank) {}

  int rank() const { return rank_; }
  int size() const { return w_->size(); }
  std::uintptr_t key() const { return reinterpret_cast<std::uintptr_t>(w_.get()); }
  static constexpr std::string_view name() { return Ops::name; }
  [[nodiscard]] Ops& ops() const { return *ops_; }
  [[nodiscard]] detail::ThreadWorld& world() const { return *w_; }

  /// Unchecked: a plain barrier. Checked: a collective of its own, fingerprint "barrier (#s)".
  void barrier() {
    ops_->fence();
    if (!check_collectives()) return w_->barrier(rank_);
    checked_rendezvous(detail::CheckedOp::barrier);
  }
  /// Checked mode only: the rendezvous every rank makes when its run_ranks body returns, so that
  /// a rank that skipped a collective meets the others' call there (a mismatch, not a hang).
  void end_of_body() {
    if (check_collectives()) checked_rendezvous(detail::CheckedOp::end_of_body);
  }

  // buf[n] := Σ_ranks buf[n] in one phase: rank r owns chunk r; it sums chunk r of every rank's
  // buffer in rank order 0, 1, …, P−1 and writes the sum into every rank's buffer. Nobody else
  // reads or writes chunk r, so no copy of the input is needed, every rank ends with the same
  // bits, and each element is read P times and written P times in all (the minimum).
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    publish(buf, buf, n, t, info, detail::CheckedOp::all_reduce, op);
    const int P = size();
    const std::size_t es = size_of(t);
    const auto range = chunk(n, rank_);  // [lo, hi): a lambda cannot capture a structured binding (C++17)
    const std::size_t lo = range.first, hi = range.second;
    if (hi > lo) {
      const auto dst = [&](int s) -> void* { return static_cast<char*>(w_->recv_[s]) + lo * es; };
      const auto src = [&](int s) -> const void* { return static_cast<const char*>(w_->recv_[s]) + lo * es; };
      ops_->reduce(P, dst, P, src, hi - lo, t, op);
    }
    finish();
  }

  void all_gather(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv, n, t, info, detail::CheckedOp::all_gather);
    for (int s = 0; s < size(); ++s) ops_->copy(static_cast<char*>(recv) + s * bytes, w_->send_[s], bytes);
    finish();
  }

  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    publish(send, recv, n, t, info, detail::CheckedOp::reduce_scatter, op);
    const std::size_t off = static_cast<std::size_t>(rank_) * n * size_of(t);
    if (n)  // recv may alias this rank's block of send
      ops_->reduce(1, [&](int) -> void* { return recv; }, size(),
                   [&](int s) -> const void* { return static_cast<const char*>(w_->send_[s]) + off; }, n, t, op);
    finish();
  }

  void all_to_all(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv, n, t, info, detail::CheckedOp::all_to_all);
    for (int s = 0; s < size(); ++s)
      ops_->copy(static_cast<char*>(recv) + s * bytes, static_cast<const char*>(w_->send_[s]) + rank_ * bytes, bytes);
    finish();
  }

  /// recv block s (recv_counts[s] elements) := block `rank` of rank s's send (its
  /// send_counts[rank] elements); blocks contiguous in rank order. Before any data moves every
  /// rank compares the whole count matrix (the arrays are published), checked or not: a pair that
  /// disagrees is a CollectiveMismatchError on every rank, never a read or write past a buffer.
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t, const CallInfo& info = {}) {
    const int P = size();
    std::size_t total = 0;
    for (int s = 0; s < P; ++s) total += send_counts[s];
    publish(send, recv, total, t, info, detail::CheckedOp::all_to_allv, ReduceOp::sum, -1, size_of(t), send_counts,
            recv_counts);
    std::string msg = detail::all_to_allv_mismatch(
        Ops::name, P, [&](int s, int r) { return w_->send_counts_[s][r]; },
        [&](int r, int s) { return w_->recv_counts_[r][s]; });
    if (!msg.empty()) {
      w_->barrier(rank_);  // every rank found it: meet before any rank's next call reuses the slots
      throw CollectiveMismatchError(std::move(msg));
    }
    const std::size_t es = size_of(t);
    std::size_t at = 0;  // this rank's receive displacement
    for (int s = 0; s < P; ++s) {
      std::size_t from = 0;  // rank s's send displacement of the block for this rank
      for (int k = 0; k < rank_; ++k) from += w_->send_counts_[s][k];
      if (recv_counts[s])
        ops_->copy(static_cast<char*>(recv) + at * es, static_cast<const char*>(w_->send_[s]) + from * es,
                   recv_counts[s] * es);
      at += recv_counts[s];
    }
    finish();
  }

  void broadcast(void* buf, std::size_t n, DType t, int root, const CallInfo& info = {}) {
    check_peer(root, "broadcast root");
    publish(buf, buf, n, t, info, detail::CheckedOp::broadcast, ReduceOp::sum, root);
    if (rank_ != root) ops_->copy(buf, w_->send_[root], n * size_of(t));
    finish();
  }

  /// MPI_Comm_split's contract on threads: a collective over this world; the ranks that pass the
  /// same `color` form a sub-world, ranked by (`key`, rank here). Every rank gets its handle in
  /// it; the sub-world is aborted with this one (so a failing rank never leaves a mesh axis
  /// waiting). A negative color is an error (there is no MPI_UNDEFINED here).
  [[nodiscard]] BasicThreadComm split(int color, int key) {
    if (color < 0) throw CommError(detail::cat(Ops::name, "::split: color ", color, " is negative"));
    std::vector<std::int64_t> mine{color, key}, all(2 * static_cast<std::size_t>(size()));
    all_gather(mine.data(), all.data(), 2, DType::i64, CallInfo{"-", "-", true});
    // This color's ranks in (key, rank) order: sub rank i is members[i] here.
    std::vector<int> members;
    for (int r = 0; r < size(); ++r)
      if (all[2 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
    const int leader = *std::min_element(members.begin(), members.end());  // makes the sub-world
    const int sub_size = static_cast<int>(members.size());
    const int sub_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    if (leader == rank_) {
      auto sub = std::make_shared<detail::ThreadWorld>(sub_size, w_->name(), w_->release());
      sub->set_spin(w_->spins());  // the parent's threads share the cores: no spinning if they do not fit
      w_->adopt(sub, members);
      w_->split_slot_[rank_] = std::move(sub);
    }
    w_->barrier(rank_);
    BasicThreadComm out(w_->split_slot_[leader], sub_rank, ops_);
    w_->barrier(rank_);  // every rank has its copy before a later split reuses the slots
    if (leader == rank_) w_->split_slot_[rank_].reset();
    return out;
  }

  /// Every message carries its description (dtype, count, layout, shape: comm/p2p_check.hpp),
  /// which the receive compares with its own before copying, checked or not.
  void send(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    check_peer(peer, "send peer");
    w_->post(rank_, peer, buf, n * size_of(t), *ops_, detail::MessageRecord(t, n, info));
  }
  /// Checked mode: under the watchdog (a recv whose send never comes raises).
  void recv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    check_peer(peer, "recv peer");
    w_->take(peer, rank_, buf, n * size_of(t), *ops_, detail::MessageRecord(t, n, info), check_collectives());
  }
  /// The send is buffered (the message is copied into the peer's mailbox): complete at once.
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    send(buf, n, t, peer, info);
    return {};
  }
  /// Posted now: it takes the next message from the peer in posting order (as MPI matches),
  /// whenever it is waited for. test() takes it if it has arrived (never blocks); wait() waits
  /// (under the watchdog in checked mode).
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    check_peer(peer, "recv peer");
    const detail::MessageRecord want(t, n, info);
    auto [ticket, posted] = w_->claim_into(peer, rank_, buf, n * size_of(t), want);
    return Request(PendingRecv{w_, ops_, peer, rank_, ticket, std::move(posted), buf, n * size_of(t), want});
  }

 private:
  struct PendingRecv {
    std::shared_ptr<detail::ThreadWorld> w;
    std::shared_ptr<Ops> ops;
    int src, dst;
    std::uint64_t ticket;
    std::shared_ptr<detail::ThreadWorld::Posted> posted;  // null: the message was there when posted
    void* buf;
    std::size_t bytes;
    detail::MessageRecord want;
    bool test() { return w->try_ticket(src, dst, ticket, posted.get(), buf, bytes, *ops, want); }
    void wait() { w->take_ticket(src, dst, ticket, posted.get(), buf, bytes, *ops, want, check_collectives()); }
    void cancel() noexcept { w->cancel_ticket(src, dst, ticket, posted.get()); }
    void dropped(const std::exception_ptr& e) noexcept {
      try {
        std::rethrow_exception(e);
      } catch (const CommAbortedError&) {  // another rank's failure: the abort already says so
      } catch (const std::exception& x) {
        w->note_dropped_failure(dst, x.what());
      } catch (...) {
        w->note_dropped_failure(dst, "unknown exception");
      }
    }
  };

 public:

 private:
  // Publish this rank's buffers and wait until every rank has published; then, before any data
  // moves, check that the ranks agree: the fingerprints in checked mode, and always the kind and
  // the block's bytes (so that no rank reads or writes past a peer's buffer).
  // `block_bytes` overrides n·size_of(t) for the structural check (all_to_allv: the element size;
  // its counts are compared separately); `sc`, `rc`: all_to_allv's count arrays.
  void publish(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info, detail::CheckedOp kind,
               ReduceOp op = ReduceOp::sum, int root = -1, std::size_t block_bytes = static_cast<std::size_t>(-1),
               const std::size_t* sc = nullptr, const std::size_t* rc = nullptr) {
    ops_->fence();  // this rank's inputs are complete before a peer reads them
    const bool checked = check_collectives();
    if (checked) {
      const auto fp = detail::Fingerprint::make(kind, n, t, info, ++w_->seq_[rank_], op, root);
      w_->barrier(rank_, &fp);  // the previous collective's readers are done with the slots
    } else {
      w_->barrier(rank_);
    }
    w_->send_[rank_] = send;
    w_->recv_[rank_] = recv;
    w_->kind_[rank_] = kind;
    w_->bytes_[rank_] = block_bytes == static_cast<std::size_t>(-1) ? n * size_of(t) : block_bytes;
    w_->send_counts_[rank_] = sc;
    w_->recv_counts_[rank_] = rc;
    w_->barrier(rank_);
    if (checked) check_fingerprints();
    for (int r = 1; r < size(); ++r)
      if (w_->kind_[r] != w_->kind_[0] || w_->bytes_[r] != w_->bytes_[0]) {
        std::string msg = detail::cat(Ops::name, ": mismatched collectives: rank 0: ", to_string(w_->kind_[0]), " of ",
                                      w_->bytes_[0], " bytes; rank ", r, ": ", to_string(w_->kind_[r]), " of ",
                                      w_->bytes_[r], " bytes (set_check_collectives(true) names the calls)");
        w_->barrier(rank_);  // every rank found it: meet before any rank's next call reuses the slots
        throw CollectiveMismatchError(std::move(msg));
      }
  }
  // A checked collective that moves no data (barrier, end of body): enter with the fingerprint,
  // compare, and leave only when every rank has compared (the slots are then free again).
  void checked_rendezvous(detail::CheckedOp kind) {
    const auto fp = detail::Fingerprint::make(kind, 0, DType::f64, {}, ++w_->seq_[rank_]);
    w_->barrier(rank_, &fp);
    w_->barrier(rank_);
    check_fingerprints();
    w_->barrier(rank_);
  }
  // On a mismatch every rank finds the same text; they meet once more before raising it, so that
  // no rank's next call overwrites its slot while another still reads it.
  void check_fingerprints() const {
    std::string msg = detail::mismatch_text(
        Ops::name, size(), [&](int r) -> const detail::FingerprintRecord& { return w_->fp_[r]; });
    if (msg.empty()) return;
    w_->barrier(rank_);
    throw CollectiveMismatchError(std::move(msg));
  }
  // The end of a collective: this rank's reads of peers' buffers and writes to its own are
  // complete before any rank leaves (no rank reuses a buffer a peer still reads).
  void finish() {
    ops_->fence();
    w_->barrier(rank_);
  }
  static std::shared_ptr<Ops> default_ops() {
    if constexpr (std::is_empty_v<Ops>) {
      static const auto shared = std::make_shared<Ops>();  // stateless: one for every handle
      return shared;
    } else {
      return std::make_shared<Ops>();
    }
  }
  std::pair<std::size_t, std::size_t> chunk(std::size_t n, int r) const {
    const std::size_t P = static_cast<std::size_t>(size()), base = n / P, extra = n % P;
    const std::size_t rr = static_cast<std::size_t>(r);
    const std::size_t lo = rr * base + std::min(rr, extra);
    return {lo, lo + base + (rr < extra ? 1 : 0)};
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(detail::cat(Ops::name, ": ", what, " ", peer, " is outside a group of size ", size()));
  }

  std::shared_ptr<detail::ThreadWorld> w_;
  std::shared_ptr<Ops> ops_;
  int rank_;
};

/// The thread world on host memory: the default for tests, examples and teaching.
using ThreadComm = BasicThreadComm<HostOps>;

static_assert(Communicator<ThreadComm> && InfoAwareCommunicator<ThreadComm> && VariableAllToAll<ThreadComm> &&
              AsyncPointToPoint<ThreadComm>);

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/runtime.cpp (base/linkage.hpp)
extern template class BasicThreadComm<HostOps>;
extern template struct Group::Model<ThreadComm>;
#endif

}  // namespace shardalg

