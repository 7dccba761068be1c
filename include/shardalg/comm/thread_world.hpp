// shardalg/comm/thread_world.hpp — the state the ranks of one thread world share: the rendezvous
// (a generation barrier that an aborting rank can break, with checked mode's fingerprints and the
// watchdog), the slots where the ranks publish the buffers of the collective in flight, the
// point-to-point mailbox with MPI's posting-order matching, and the sub-worlds of split().
// comm/thread.hpp's BasicThreadComm<Ops> is its only user: ThreadComm on host memory, the
// simulated world of comm/sim_world.hpp with another device's data movement.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "shardalg/base/checks.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/linkage.hpp"
#include "shardalg/comm/collective_check.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/p2p_check.hpp"

namespace shardalg::detail {

/// What each rank of a whole thread world (its root and every sub-world split from it) waits in,
/// for the watchdog's message: a rank absent from one group's collective may be waiting in
/// another group's (a mesh's other axis). Written when a checked wait starts, cleared when it ends.
class WaitBoard {
 public:
  explicit WaitBoard(int n) : at_(static_cast<std::size_t>(n)) {}
  void set(int root_rank, const FingerprintRecord& fp, int group_size) {
    std::lock_guard lk(m_);
    at_[static_cast<std::size_t>(root_rank)] = Entry{true, fp, group_size};
  }
  void clear(int root_rank) {
    std::lock_guard lk(m_);
    at_[static_cast<std::size_t>(root_rank)].waiting = false;
  }
  /// "; rank 1 waits in all_reduce f64 × 8 (#1) on another group of 2 ranks", or "" if it does not wait.
  std::string describe_other(int rank, int root_rank);

 private:
  struct Entry {
    bool waiting = false;
    FingerprintRecord fp;
    int group_size = 0;
  };
  std::mutex m_;
  std::vector<Entry> at_;
};

/// The state the ranks of one thread world share.
class ThreadWorld {
 public:
  using Release = void (*)(void*);
  /// `name` prefixes every message ("ThreadComm", "SimComm"); `release` frees a staged message
  /// (the Ops' stage()).
  explicit ThreadWorld(int n, std::string_view name = "ThreadComm", Release release = &release_host);
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;
  ~ThreadWorld();
  static void release_host(void* p) { ::operator delete(p); }

  [[nodiscard]] std::string_view name() const { return name_; }
  [[nodiscard]] Release release() const { return release_; }
  /// Messages sent and not yet received (for tests).
  [[nodiscard]] std::size_t pending_messages() {
    std::lock_guard lk(m_);
    std::size_t k = 0;
    for (const auto& [key, box] : mail_) k += box.msgs.size();
    return k;
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
  void barrier(int rank, const Fingerprint* fp = nullptr);

  void abort();

  /// A sub-world made by ThreadComm::split: aborting this world aborts it (and it starts aborted
  /// when this one already is). `ranks_here[c]`: the rank in this world of the child's rank c.
  void adopt(const std::shared_ptr<ThreadWorld>& child, const std::vector<int>& ranks_here);
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
    MessageRecord want;   // what the receive expects (comm/p2p_check.hpp)
    int state = 0;        // 0 waiting for its message, 1 being copied by the sender, 2 done
    std::size_t got = 0;  // the message's bytes
    MessageRecord got_rec;
  };
  /// A message from src to dst: copied by the sender (its `ops`) straight into the receive that
  /// was posted for it, or staged (ops.stage, a copy the receiver takes later).
  template <class Ops>
  void post(int src, int dst, const void* buf, std::size_t bytes, Ops& ops, const MessageRecord& rec) {
    std::shared_ptr<Posted> into;
    {
      std::lock_guard lk(m_);
      if (aborted_) throw_aborted();
      auto& box = mail_[{src, dst}];
      const std::uint64_t t = box.sent++;
      auto it = box.posted.find(t);
      if (it == box.posted.end()) {
        void* staged = ops.stage(bytes);
        try {
          ops.copy(staged, buf, bytes);
          ops.fence();
        } catch (...) {
          release_(staged);
          throw;
        }
        box.msgs.emplace(t, Mail{staged, bytes, rec});
        mail_cv_.notify_all();
        return;
      }
      into = it->second;
      box.posted.erase(it);
      into->state = 1;
      into->got = bytes;
      into->got_rec = rec;
    }
    // Outside the lock; the receiver waits for state 2. A message the receive does not expect is
    // not copied: the receiver raises, its buffer untouched.
    if (into->bytes == bytes && same_message(into->want, rec)) {
      ops.copy(into->buf, buf, bytes);
      ops.fence();
    }
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
  std::pair<std::uint64_t, std::shared_ptr<Posted>> claim_into(int src, int dst, void* buf, std::size_t bytes,
                                                               const MessageRecord& want);
  /// Blocking recv: claim the next message and wait for it. `watch` (checked mode): after
  /// collective_timeout() the wait ends in CollectiveTimeoutError.
  template <class Ops>
  void take(int src, int dst, void* buf, std::size_t bytes, Ops& ops, const MessageRecord& want, bool watch = false) {
    take_ticket(src, dst, claim(src, dst), nullptr, buf, bytes, ops, want, watch);
  }
  /// Wait for message `ticket` from src: copied by the sender into the posted buffer (`p`), or
  /// here from the mailbox into buf.
  template <class Ops>
  void take_ticket(int src, int dst, std::uint64_t ticket, Posted* p, void* buf, std::size_t bytes, Ops& ops,
                   const MessageRecord& want, bool watch = false) {
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
        std::string msg = cat(name_, ": rank ", dst, " waited more than ", timeout_text(limit), " in recv of ",
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
    finish_locked(box, ticket, p, src, dst, buf, bytes, ops, want);
  }
  /// Message `ticket` from src if it has arrived (delivered into buf), else false; never waits.
  template <class Ops>
  bool try_ticket(int src, int dst, std::uint64_t ticket, Posted* p, void* buf, std::size_t bytes, Ops& ops,
                  const MessageRecord& want) {
    std::unique_lock lk(m_);
    auto& box = mail_[{src, dst}];
    if (p ? p->state != 2 : box.msgs.count(ticket) == 0) {
      if (aborted_ && (!p || p->state == 0)) {
        box.posted.erase(ticket);
        throw_aborted();
      }
      return false;
    }
    finish_locked(box, ticket, p, src, dst, buf, bytes, ops, want);
    return true;
  }
  /// A posted receive given up (its rank unwinds an error): no sender writes into its buffer
  /// after this returns — a copy under way is waited for (it is short and never blocks), a
  /// message not arrived yet will be staged and dropped with the world. Never throws.
  void cancel_ticket(int src, int dst, std::uint64_t ticket, Posted* p) noexcept;
  /// run_ranks, when every rank ended in an abort: the failure that caused it, if a dropped
  /// Request hid it (note_dropped_failure), as a CommAbortedError; else nothing.
  void rethrow_dropped_failure();
  /// A Request destroyed unfinished whose wait failed on rank `rank` (its error could not leave
  /// the destructor): every rank's next abort names it, instead of "another rank failed".
  void note_dropped_failure(int rank, const std::string& what) noexcept;

 private:
  [[noreturn]] void throw_aborted() const;
  void abort_locked() {
    aborted_ = true;
    aborted_flag_.store(true);
    cv_.notify_all();
    mail_cv_.notify_all();
  }
  /// What the ranks other than `me` are in, for the watchdog's message (under the lock):
  /// "; rank 1 waits in all_reduce f64 × 8 (#3); rank 2 is not in a collective (its last: none)".
  std::string others(int me) const;

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  std::string_view name_;
  Release release_;
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
  std::string dropped_failure_;            // note_dropped_failure's text, once
  std::shared_ptr<WaitBoard> board_;       // shared by the whole world (root and sub-worlds)
  std::vector<int> root_rank_;             // this world's rank r is rank root_rank_[r] of the root
  struct Mail {
    void* buf;  // staged by the sender's ops, released with release_
    std::size_t bytes;
    MessageRecord rec;
  };
  struct Mailbox {
    std::map<std::uint64_t, Mail> msgs;                        // sent before their receive was posted
    std::map<std::uint64_t, std::shared_ptr<Posted>> posted;   // receives posted before their message
    std::uint64_t sent = 0, claimed = 0;
  };
  // The message of `ticket` has arrived: copied already (p), or copied now from the mailbox.
  template <class Ops>
  void finish_locked(Mailbox& box, std::uint64_t ticket, Posted* p, int src, int dst, void* buf, std::size_t bytes,
                     Ops& ops, const MessageRecord& want) const {
    const std::size_t got = p ? p->got : box.msgs.at(ticket).bytes;
    if (got != bytes)
      throw CommError(detail::cat(name_, ": rank ", dst, " expected ", bytes, " bytes from rank ", src, ", got ", got));
    if (std::string msg = message_mismatch(name_, dst, src, want, p ? p->got_rec : box.msgs.at(ticket).rec);
        !msg.empty())
      throw CollectiveMismatchError(std::move(msg));
    if (p) return;
    auto it = box.msgs.find(ticket);
    std::unique_ptr<void, Release> hold(it->second.buf, release_);
    box.msgs.erase(it);
    ops.copy(buf, hold.get(), bytes);
    ops.fence();
  }
  std::map<std::pair<int, int>, Mailbox> mail_;
  std::vector<std::weak_ptr<ThreadWorld>> children_;
};

#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp

SHARDALG_FUNC std::string WaitBoard::describe_other(int rank, int root_rank) {
  std::lock_guard lk(m_);
  const Entry& e = at_[static_cast<std::size_t>(root_rank)];
  if (!e.waiting) return {};
  return cat("; rank ", rank, " waits in ", describe(e.fp.view()), " on another group of ", e.group_size, " ranks");
}

SHARDALG_FUNC ThreadWorld::ThreadWorld(int n, std::string_view name, Release release)
    : send_(n),
      recv_(n),
      kind_(n),
      bytes_(n),
      fp_(n),
      seq_(n),
      name_(name),
      release_(release),
      n_(n),
      spin_(static_cast<unsigned>(n) <= std::thread::hardware_concurrency()),
      arrived_at_(n),
      recv_from_(n, -1),
      board_(std::make_shared<WaitBoard>(n)),
      root_rank_(static_cast<std::size_t>(n)) {
  for (int r = 0; r < n; ++r) root_rank_[static_cast<std::size_t>(r)] = r;
  split_slot_.resize(static_cast<std::size_t>(n));
  send_counts_.resize(static_cast<std::size_t>(n));
  recv_counts_.resize(static_cast<std::size_t>(n));
}

SHARDALG_FUNC ThreadWorld::~ThreadWorld() {
  for (auto& [key, box] : mail_)
    for (auto& [t, m] : box.msgs) release_(m.buf);
}

SHARDALG_FUNC void ThreadWorld::barrier(int rank, const Fingerprint* fp) {
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
    struct OnBoard {
      WaitBoard& b;
      int who;
      ~OnBoard() { b.clear(who); }
    } on_board{*board_, root_rank_[static_cast<std::size_t>(rank)]};
    board_->set(on_board.who, fp_[rank], n_);
    const double limit = collective_timeout();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    if (!cv_.wait_until(lk, deadline, released)) {
      std::string msg = cat(name_, ": rank ", rank, " waited more than ", timeout_text(limit), " in ",
                            describe(*fp), others(rank));
      abort_locked();
      throw CollectiveTimeoutError(std::move(msg));
    }
  } else {
    cv_.wait(lk, released);
  }
  if (generation_.load(std::memory_order_acquire) == gen) throw_aborted();
}

SHARDALG_FUNC void ThreadWorld::abort() {
  std::vector<std::weak_ptr<ThreadWorld>> children;
  {
    std::lock_guard lk(m_);
    abort_locked();
    children = children_;
  }
  for (auto& c : children)  // a mesh's sub-worlds: their waiters are released too
    if (auto w = c.lock()) w->abort();
}

SHARDALG_FUNC void ThreadWorld::adopt(const std::shared_ptr<ThreadWorld>& child, const std::vector<int>& ranks_here) {
  child->board_ = board_;
  for (std::size_t c = 0; c < ranks_here.size(); ++c)
    child->root_rank_[c] = root_rank_[static_cast<std::size_t>(ranks_here[c])];
  bool aborted = false;
  {
    std::lock_guard lk(m_);
    children_.push_back(child);
    aborted = aborted_;
  }
  if (aborted) child->abort();
}

SHARDALG_FUNC std::pair<std::uint64_t, std::shared_ptr<ThreadWorld::Posted>> ThreadWorld::claim_into(
    int src, int dst, void* buf, std::size_t bytes, const MessageRecord& want) {
  std::lock_guard lk(m_);
  auto& box = mail_[{src, dst}];
  const std::uint64_t t = box.claimed++;
  if (box.msgs.count(t)) return {t, nullptr};
  auto p = std::make_shared<Posted>(Posted{buf, bytes, want, 0, 0, MessageRecord{}});
  box.posted.emplace(t, p);
  return {t, p};
}

SHARDALG_FUNC void ThreadWorld::cancel_ticket(int src, int dst, std::uint64_t ticket, Posted* p) noexcept {
  std::unique_lock lk(m_);
  auto& box = mail_[{src, dst}];
  if (p) {
    mail_cv_.wait(lk, [&] { return p->state != 1; });
    box.posted.erase(ticket);
    return;
  }
  if (auto it = box.msgs.find(ticket); it != box.msgs.end()) {
    release_(it->second.buf);
    box.msgs.erase(it);
  }
}

SHARDALG_FUNC void ThreadWorld::rethrow_dropped_failure() {
  std::lock_guard lk(m_);
  if (!dropped_failure_.empty()) throw CommAbortedError(cat(name_, ": collective aborted; ", dropped_failure_));
}

SHARDALG_FUNC void ThreadWorld::note_dropped_failure(int rank, const std::string& what) noexcept {
  try {
    std::lock_guard lk(m_);
    if (dropped_failure_.empty())
      dropped_failure_ = cat("rank ", rank, " destroyed an unfinished Request whose wait failed: ", what);
  } catch (...) {
  }
}

SHARDALG_FUNC void ThreadWorld::throw_aborted() const {
  if (!dropped_failure_.empty()) throw CommAbortedError(cat(name_, ": collective aborted; ", dropped_failure_));
  throw CommAbortedError(cat(name_, ": another rank failed; collective aborted"));
}

SHARDALG_FUNC std::string ThreadWorld::others(int me) const {
  const std::uint64_t at = generation_.load(std::memory_order_relaxed) + 1;  // the barrier now filling
  std::string s;
  for (int r = 0; r < n_; ++r) {
    if (r == me) continue;
    if (arrived_at_[r] == at) s += cat("; rank ", r, " waits in ", describe(fp_[r].view()));
    else if (recv_from_[r] >= 0) s += cat("; rank ", r, " waits in recv from rank ", recv_from_[r]);
    else if (std::string o = board_->describe_other(r, root_rank_[static_cast<std::size_t>(r)]); !o.empty()) s += o;
    else s += cat("; rank ", r, " is not in a collective (its last: ", describe(fp_[r].view()), ")");
  }
  return s;
}

#endif  // SHARDALG_RUNTIME_BODIES

}  // namespace shardalg::detail
