// shardalg/comm/thread.hpp — N simulated ranks in one process, one thread each.
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
#include "shardalg/base/errors.hpp"
#include "shardalg/base/threads.hpp"

namespace shardalg {

namespace detail {

/// The state the ranks of one thread world share.
class ThreadWorld {
 public:
  explicit ThreadWorld(int n)
      : send_(n),
        recv_(n),
        kind_(n),
        bytes_(n),
        fp_(n),
        seq_(n),
        n_(n),
        spin_(static_cast<unsigned>(n) <= std::thread::hardware_concurrency()),
        arrived_at_(n),
        recv_from_(n, -1) {
    split_slot_.resize(static_cast<std::size_t>(n));
    send_counts_.resize(static_cast<std::size_t>(n));
    recv_counts_.resize(static_cast<std::size_t>(n));
  }

  int size() const { return n_; }
  /// Whether waiting ranks spin before blocking (the world's threads fit on the cores).
  bool spins() const { return spin_; }
  /// A sub-world of a world whose threads do not fit on the cores must not spin either: its
  /// ranks share the cores with every other thread of the world (ThreadComm::split).
  void set_spin(bool on) { spin_ = spin_ && on; }

  /// A generation barrier that an aborting rank can break. When the ranks fit on the cores it
  /// spins briefly before blocking (a futex wake costs microseconds; collectives take three).
  /// `fp` (checked mode, the rendezvous' entrance): this rank's fingerprint, written into its slot
  /// under the lock, and the watchdog: after collective_timeout() the wait ends in
  /// CollectiveTimeoutError naming what every rank is in, and the world is aborted.
  void barrier(int rank, const Fingerprint* fp = nullptr) {
    std::unique_lock lk(m_);
    if (aborted_) throw_aborted();
    const auto gen = generation_.load(std::memory_order_relaxed);
    arrived_at_[rank] = gen + 1;
    if (fp) fp_[rank] = FingerprintRecord(*fp);
    if (++arrived_ == n_) {
      arrived_ = 0;
      generation_.store(gen + 1, std::memory_order_release);
      cv_.notify_all();
      return;
    }
    if (spin_) {
      lk.unlock();
      for (int i = 0; i < 20000; ++i) {
        if (generation_.load(std::memory_order_acquire) != gen) return;
        if (aborted_flag_.load(std::memory_order_relaxed)) break;
        cpu_relax();
      }
      lk.lock();
    }
    const auto released = [&] { return generation_.load(std::memory_order_acquire) != gen || aborted_; };
    if (fp) {
      const double limit = collective_timeout();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
      if (!cv_.wait_until(lk, deadline, released)) {
        std::string msg = cat("ThreadComm: rank ", rank, " waited more than ", timeout_text(limit), " in ",
                              describe(*fp), others(rank));
        abort_locked();
        throw CollectiveTimeoutError(std::move(msg));
      }
    } else {
      cv_.wait(lk, released);
    }
    if (generation_.load(std::memory_order_acquire) == gen) throw_aborted();
  }

  void abort() {
    std::vector<std::weak_ptr<ThreadWorld>> children;
    {
      std::lock_guard lk(m_);
      abort_locked();
      children = children_;
    }
    for (auto& c : children)  // a mesh's sub-worlds: their waiters are released too
      if (auto w = c.lock()) w->abort();
  }

  /// A sub-world made by ThreadComm::split: aborting this world aborts it (and it starts aborted
  /// when this one already is).
  void adopt(const std::shared_ptr<ThreadWorld>& child) {
    bool aborted = false;
    {
      std::lock_guard lk(m_);
      children_.push_back(child);
      aborted = aborted_;
    }
    if (aborted) child->abort();
  }
  // split(): the sub-world a color's leader made, read by the color's other ranks.
  std::vector<std::shared_ptr<ThreadWorld>> split_slot_;

  // Published pointers of the collective in flight (one slot per rank), with its kind and the
  // size in bytes of one block (the structural check).
  std::vector<const void*> send_;
  std::vector<void*> recv_;
  std::vector<CheckedOp> kind_;
  std::vector<std::size_t> bytes_;
  // all_to_allv: each rank's send and receive counts (arrays of size(); null for the others).
  std::vector<const std::size_t*> send_counts_, recv_counts_;
  // Checked mode: each rank's fingerprint of its current (or last) checked collective, written
  // under the lock at the rendezvous' entrance; and its sequence count (only rank r touches seq_[r]).
  std::vector<FingerprintRecord> fp_;
  std::vector<std::uint64_t> seq_;

  // Point to point. Each (src, dst) pair numbers its messages as they are sent and its
  // receives as they are posted (recv, or irecv when it is called); receive k takes message k —
  // MPI's rule: receives match in the order they are posted, whenever they are waited for.
  // A message sent after its irecv was posted is copied by the sender straight into the posted
  // buffer (as a NIC or a copy engine would): the receiver does not copy it on its own time.
  struct Posted {
    void* buf;
    std::size_t bytes;
    int state = 0;        // 0 waiting for its message, 1 being copied by the sender, 2 done
    std::size_t got = 0;  // the message's bytes
  };
  void post(int src, int dst, const void* buf, std::size_t bytes) {
    std::shared_ptr<Posted> into;
    {
      std::lock_guard lk(m_);
      if (aborted_) throw_aborted();
      auto& box = mail_[{src, dst}];
      const std::uint64_t t = box.sent++;
      auto it = box.posted.find(t);
      if (it == box.posted.end()) {
        box.msgs.emplace(t, std::vector<char>(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes));
        mail_cv_.notify_all();
        return;
      }
      into = it->second;
      box.posted.erase(it);
      into->state = 1;
      into->got = bytes;
    }
    if (into->bytes == bytes) std::memcpy(into->buf, buf, bytes);  // outside the lock; the receiver waits for state 2
    std::lock_guard lk(m_);
    into->state = 2;
    mail_cv_.notify_all();
  }
  /// A receive posted now: its ticket (the number of the message it will take).
  std::uint64_t claim(int src, int dst) {
    std::lock_guard lk(m_);
    return mail_[{src, dst}].claimed++;
  }
  /// irecv: a ticket, and when its message has not arrived yet, the buffer registered for the
  /// sender to copy into (null when the message is already here: the receiver copies it).
  std::pair<std::uint64_t, std::shared_ptr<Posted>> claim_into(int src, int dst, void* buf, std::size_t bytes) {
    std::lock_guard lk(m_);
    auto& box = mail_[{src, dst}];
    const std::uint64_t t = box.claimed++;
    if (box.msgs.count(t)) return {t, nullptr};
    auto p = std::make_shared<Posted>(Posted{buf, bytes});
    box.posted.emplace(t, p);
    return {t, p};
  }
  /// Blocking recv: claim the next message and wait for it. `watch` (checked mode): after
  /// collective_timeout() the wait ends in CollectiveTimeoutError.
  void take(int src, int dst, void* buf, std::size_t bytes, bool watch = false) {
    take_ticket(src, dst, claim(src, dst), nullptr, buf, bytes, watch);
  }
  /// Wait for message `ticket` from src: copied by the sender into the posted buffer (`p`), or
  /// here from the mailbox into buf.
  void take_ticket(int src, int dst, std::uint64_t ticket, Posted* p, void* buf, std::size_t bytes, bool watch = false) {
    std::unique_lock lk(m_);
    auto& box = mail_[{src, dst}];
    const auto arrived = [&] { return p ? p->state == 2 : box.msgs.count(ticket) > 0; };
    const auto ready = [&] { return arrived() || (aborted_ && (!p || p->state == 0)); };
    if (watch) {
      recv_from_[dst] = src;
      const double limit = collective_timeout();
      const bool ok =
          mail_cv_.wait_until(lk, std::chrono::steady_clock::now() + std::chrono::duration<double>(limit), ready);
      recv_from_[dst] = -1;
      if (!ok && !(p && p->state == 1)) {  // (a copy under way finishes: its buffer must outlive it)
        std::string msg = cat("ThreadComm: rank ", dst, " waited more than ", timeout_text(limit), " in recv of ",
                              bytes, " bytes from rank ", src, others(dst));
        abort_locked();
        box.posted.erase(ticket);  // no sender writes into it after this
        throw CollectiveTimeoutError(std::move(msg));
      }
    }
    mail_cv_.wait(lk, ready);
    if (!arrived()) {
      box.posted.erase(ticket);
      throw_aborted();
    }
    finish_locked(box, ticket, p, src, dst, buf, bytes);
  }
  /// Message `ticket` from src if it has arrived (delivered into buf), else false; never waits.
  bool try_ticket(int src, int dst, std::uint64_t ticket, Posted* p, void* buf, std::size_t bytes) {
    std::unique_lock lk(m_);
    auto& box = mail_[{src, dst}];
    if (p ? p->state != 2 : box.msgs.count(ticket) == 0) {
      if (aborted_ && (!p || p->state == 0)) {
        box.posted.erase(ticket);
        throw_aborted();
      }
      return false;
    }
    finish_locked(box, ticket, p, src, dst, buf, bytes);
    return true;
  }

 private:
  [[noreturn]] static void throw_aborted() {
    throw CommAbortedError("ThreadComm: another rank failed; collective aborted");
  }
  void abort_locked() {
    aborted_ = true;
    aborted_flag_.store(true);
    cv_.notify_all();
    mail_cv_.notify_all();
  }
  /// What the ranks other than `me` are in, for the watchdog's message (under the lock):
  /// "; rank 1 waits in all_reduce f64 × 8 (#3); rank 2 is not in a collective (its last: none)".
  std::string others(int me) const {
    const std::uint64_t at = generation_.load(std::memory_order_relaxed) + 1;  // the barrier now filling
    std::string s;
    for (int r = 0; r < n_; ++r) {
      if (r == me) continue;
      if (arrived_at_[r] == at) s += cat("; rank ", r, " waits in ", describe(fp_[r].view()));
      else if (recv_from_[r] >= 0) s += cat("; rank ", r, " waits in recv from rank ", recv_from_[r]);
      else s += cat("; rank ", r, " is not in a collective (its last: ", describe(fp_[r].view()), ")");
    }
    return s;
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  int n_;
  bool spin_;
  std::mutex m_;
  std::condition_variable cv_, mail_cv_;
  int arrived_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> aborted_flag_{false};
  bool aborted_ = false;
  std::vector<std::uint64_t> arrived_at_;  // generation + 1 of the barrier rank r last entered
  std::vector<int> recv_from_;             // the peer rank r waits on in a watched recv, or −1
  struct Mailbox {
    std::map<std::uint64_t, std::vector<char>> msgs;           // sent before their receive was posted
    std::map<std::uint64_t, std::shared_ptr<Posted>> posted;   // receives posted before their message
    std::uint64_t sent = 0, claimed = 0;
  };
  // The message of `ticket` has arrived: copied already (p), or copied now from the mailbox.
  static void finish_locked(Mailbox& box, std::uint64_t ticket, Posted* p, int src, int dst, void* buf,
                            std::size_t bytes) {
    const std::size_t got = p ? p->got : box.msgs.at(ticket).size();
    if (got != bytes)
      throw CommError(detail::cat("ThreadComm: rank ", dst, " expected ", bytes, " bytes from rank ", src, ", got ", got));
    if (p) return;
    auto it = box.msgs.find(ticket);
    std::memcpy(buf, it->second.data(), bytes);
    box.msgs.erase(it);
  }
  std::map<std::pair<int, int>, Mailbox> mail_;
  std::vector<std::weak_ptr<ThreadWorld>> children_;
};

}  // namespace detail

/// One rank's handle on a thread world. Cheap to copy.
///
/// Each collective also takes a CallInfo (the ledger passes its layouts and scope on): with
/// checked collectives on (base/checks.hpp) they are part of the fingerprint the ranks compare.
class ThreadComm {
 public:
  ThreadComm(std::shared_ptr<detail::ThreadWorld> w, int rank) : w_(std::move(w)), rank_(rank) {}

  int rank() const { return rank_; }
  int size() const { return w_->size(); }
  std::uintptr_t key() const { return reinterpret_cast<std::uintptr_t>(w_.get()); }
  static constexpr std::string_view name() { return "ThreadComm"; }

  /// Unchecked: a plain barrier. Checked: a collective of its own, fingerprint "barrier (#s)".
  void barrier() {
    if (!check_collectives()) return w_->barrier(rank_);
    checked_rendezvous(detail::CheckedOp::barrier);
  }
  /// Checked mode only: the rendezvous every rank makes when its run_ranks body returns, so that
  /// a rank that skipped a collective meets the others' call there (a mismatch, not a hang).
  void end_of_body() {
    if (check_collectives()) checked_rendezvous(detail::CheckedOp::end_of_body);
  }

  // buf[n] := Σ_ranks buf[n] in one phase: rank r owns chunk r; tile by tile it sums chunk r of
  // every rank's buffer in rank order 0, 1, …, P−1 and writes the sum into every rank's buffer.
  // Nobody else reads or writes chunk r, so no copy of the input is needed, every rank ends with
  // the same bits, and each element is read P times and written P times in all (the minimum).
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    dispatch_host(t, [&]<class T>() {
      publish(buf, buf, n, t, info, detail::CheckedOp::all_reduce, op);
      const int P = size();
      constexpr std::size_t tile = detail::reduce_tile_bytes / sizeof(T);
      T acc[tile];
      const auto range = chunk(n, rank_);
      const std::size_t lo = range.first, hi = range.second;
      for (std::size_t t0 = lo; t0 < hi; t0 += tile) {
        const std::size_t len = std::min(tile, hi - t0);
        std::copy_n(static_cast<const T*>(w_->recv_[0]) + t0, len, acc);
        for (int s = 1; s < P; ++s) detail::accumulate(acc, static_cast<const T*>(w_->recv_[s]) + t0, len, op);
        for (int s = 0; s < P; ++s) std::copy_n(acc, len, static_cast<T*>(w_->recv_[s]) + t0);
      }
      w_->barrier(rank_);
    });
  }

  void all_gather(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv, n, t, info, detail::CheckedOp::all_gather);
    for (int s = 0; s < size(); ++s) {
      char* dst = static_cast<char*>(recv) + s * bytes;
      if (w_->send_[s] != dst) std::memcpy(dst, w_->send_[s], bytes);
    }
    w_->barrier(rank_);
  }

  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    dispatch_host(t, [&]<class T>() {
      publish(send, recv, n, t, info, detail::CheckedOp::reduce_scatter, op);
      constexpr std::size_t tile = detail::reduce_tile_bytes / sizeof(T);
      T acc[tile];
      auto* out = static_cast<T*>(recv);
      const std::size_t off = static_cast<std::size_t>(rank_) * n;
      for (std::size_t t0 = 0; t0 < n; t0 += tile) {  // recv may alias this rank's block of send
        const std::size_t len = std::min(tile, n - t0);
        std::copy_n(static_cast<const T*>(w_->send_[0]) + off + t0, len, acc);
        for (int s = 1; s < size(); ++s)
          detail::accumulate(acc, static_cast<const T*>(w_->send_[s]) + off + t0, len, op);
        std::copy_n(acc, len, out + t0);
      }
      w_->barrier(rank_);
    });
  }

  void all_to_all(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv, n, t, info, detail::CheckedOp::all_to_all);
    for (int s = 0; s < size(); ++s)
      std::memcpy(static_cast<char*>(recv) + s * bytes,
                  static_cast<const char*>(w_->send_[s]) + rank_ * bytes, bytes);
    w_->barrier(rank_);
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
        "ThreadComm", P, [&](int s, int r) { return w_->send_counts_[s][r]; },
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
        std::memcpy(static_cast<char*>(recv) + at * es, static_cast<const char*>(w_->send_[s]) + from * es,
                    recv_counts[s] * es);
      at += recv_counts[s];
    }
    w_->barrier(rank_);
  }

  void broadcast(void* buf, std::size_t n, DType t, int root, const CallInfo& info = {}) {
    check_peer(root, "broadcast root");
    publish(buf, buf, n, t, info, detail::CheckedOp::broadcast, ReduceOp::sum, root);
    if (rank_ != root) std::memcpy(buf, w_->send_[root], n * size_of(t));
    w_->barrier(rank_);
  }

  /// MPI_Comm_split's contract on threads: a collective over this world; the ranks that pass the
  /// same `color` form a sub-world, ranked by (`key`, rank here). Every rank gets its handle in
  /// it; the sub-world is aborted with this one (so a failing rank never leaves a mesh axis
  /// waiting). A negative color is an error (there is no MPI_UNDEFINED here).
  [[nodiscard]] ThreadComm split(int color, int key) {
    if (color < 0) throw CommError(detail::cat("ThreadComm::split: color ", color, " is negative"));
    std::vector<std::int64_t> mine{color, key}, all(2 * static_cast<std::size_t>(size()));
    all_gather(mine.data(), all.data(), 2, DType::i64, CallInfo{"-", "-", true});
    int leader = -1, sub_size = 0, sub_rank = 0;
    for (int r = 0; r < size(); ++r) {
      if (all[2 * r] != color) continue;
      if (leader < 0) leader = r;
      ++sub_size;
      const std::int64_t k = all[2 * r + 1];
      if (k < key || (k == key && r < rank_)) ++sub_rank;
    }
    if (leader == rank_) {
      auto sub = std::make_shared<detail::ThreadWorld>(sub_size);
      sub->set_spin(w_->spins());  // the parent's threads share the cores: no spinning if they do not fit
      w_->adopt(sub);
      w_->split_slot_[rank_] = std::move(sub);
    }
    w_->barrier(rank_);
    ThreadComm out(w_->split_slot_[leader], sub_rank);
    w_->barrier(rank_);  // every rank has its copy before a later split reuses the slots
    if (leader == rank_) w_->split_slot_[rank_].reset();
    return out;
  }

  void send(const void* buf, std::size_t n, DType t, int peer, const CallInfo& = {}) {
    check_peer(peer, "send peer");
    w_->post(rank_, peer, buf, n * size_of(t));
  }
  /// Checked mode: under the watchdog (a recv whose send never comes raises).
  void recv(void* buf, std::size_t n, DType t, int peer, const CallInfo& = {}) {
    check_peer(peer, "recv peer");
    w_->take(peer, rank_, buf, n * size_of(t), check_collectives());
  }
  /// The send is buffered (the message is copied into the peer's mailbox): complete at once.
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer, const CallInfo& = {}) {
    send(buf, n, t, peer);
    return {};
  }
  /// Posted now: it takes the next message from the peer in posting order (as MPI matches),
  /// whenever it is waited for. test() takes it if it has arrived (never blocks); wait() waits
  /// (under the watchdog in checked mode).
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer, const CallInfo& = {}) {
    check_peer(peer, "recv peer");
    auto [ticket, posted] = w_->claim_into(peer, rank_, buf, n * size_of(t));
    return Request(PendingRecv{w_, peer, rank_, ticket, std::move(posted), buf, n * size_of(t)});
  }

 private:
  struct PendingRecv {
    std::shared_ptr<detail::ThreadWorld> w;
    int src, dst;
    std::uint64_t ticket;
    std::shared_ptr<detail::ThreadWorld::Posted> posted;  // null: the message was there when posted
    void* buf;
    std::size_t bytes;
    bool test() { return w->try_ticket(src, dst, ticket, posted.get(), buf, bytes); }
    void wait() { w->take_ticket(src, dst, ticket, posted.get(), buf, bytes, check_collectives()); }
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
        std::string msg = detail::cat("ThreadComm: mismatched collectives: rank 0: ", to_string(w_->kind_[0]), " of ",
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
        "ThreadComm", size(), [&](int r) -> const detail::FingerprintRecord& { return w_->fp_[r]; });
    if (msg.empty()) return;
    w_->barrier(rank_);
    throw CollectiveMismatchError(std::move(msg));
  }
  std::pair<std::size_t, std::size_t> chunk(std::size_t n, int r) const {
    const std::size_t P = static_cast<std::size_t>(size()), base = n / P, extra = n % P;
    const std::size_t rr = static_cast<std::size_t>(r);
    const std::size_t lo = rr * base + std::min(rr, extra);
    return {lo, lo + base + (rr < extra ? 1 : 0)};
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(detail::cat("ThreadComm: ", what, " ", peer, " is outside a group of size ", size()));
  }

  std::shared_ptr<detail::ThreadWorld> w_;
  int rank_;
};

static_assert(Communicator<ThreadComm> && InfoAwareCommunicator<ThreadComm> && VariableAllToAll<ThreadComm> &&
              AsyncPointToPoint<ThreadComm>);

}  // namespace shardalg

