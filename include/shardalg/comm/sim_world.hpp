// shardalg/comm/sim_world.hpp — a simulated multi-rank communicator whose data movement is
// delegated to an `Ops` policy: the bookkeeping (who publishes what, which chunk each rank
// reduces, block offsets, barriers, the point-to-point mailbox, abort on failure) is written
// once here, in plain C++.
//
//   SimComm<CudaSimOps>   ranks are host threads sharing one GPU, each with its own stream;
//                         collectives are device-to-device copies and a rank-ordered reduction
//                         kernel (sim_comm.hpp). NCCL refuses two ranks on one GPU; this does not,
//                         so TP = 2 and 4 run on a single device.
//   SimComm<HostSimOps>   the same protocol on host memory (memmove and loops). It needs no GPU,
//                         and the tests run it against the core's algebra to check the protocol.
//
// An Ops object belongs to one rank and provides
//   copy(dst, src, bytes)                              enqueue a copy (either may be a peer's buffer)
//   reduce(dst, srcs, nsrc, n, dtype, op)              enqueue dst[i] = srcs[0][i] ⊕ … ⊕ srcs[nsrc−1][i]
//   fence()                                            wait until this rank's enqueued work is done
//   stage(bytes) / static release(p)                   scratch for the buffered send/recv mailbox
//
// Protocol of every collective (the same as ThreadComm, with a fence before each barrier):
// fence (my buffer is ready) → barrier → publish pointers → barrier → each rank writes only its
// own output, reading peers' inputs → fence → barrier (no rank reuses a buffer a peer still reads).
// Reductions combine in rank order 0, 1, …, P−1, so replicas are bit-identical.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg::cuda {

namespace sim {

/// State shared by the ranks of one simulated world.
class World {
 public:
  using Release = void (*)(void*);
  World(int n, Release release)
      : send_(n), recv_(n), send_counts_(n), recv_counts_(n), split_key_(static_cast<std::size_t>(n)), split_slot_(static_cast<std::size_t>(n)), n_(n),
        release_(release) {}
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World() {
    for (auto& [key, box] : mail_)
      for (auto& [k, m] : box.msgs) release_(m.buf);
  }

  [[nodiscard]] int size() const { return n_; }

  void barrier() {
    std::unique_lock lk(m_);
    if (aborted_) throw_aborted();
    const auto gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      ++barriers_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw_aborted();
  }
  void abort() {
    std::vector<std::shared_ptr<World>> children;
    {
      std::lock_guard lk(m_);
      aborted_ = true;
      cv_.notify_all();
      mail_cv_.notify_all();
      children = children_;
    }
    for (auto& c : children) c->abort();  // a rank waiting in a sub-world (a mesh axis) wakes too
  }
  /// A sub-world made by SimComm::split: aborting this world aborts it (and it starts aborted
  /// when this one already is).
  void adopt(const std::shared_ptr<World>& child) {
    bool aborted = false;
    {
      std::lock_guard lk(m_);
      children_.push_back(child);
      aborted = aborted_;
    }
    if (aborted) child->abort();
  }

  // Point to point: each (src, dst) pair numbers its messages as they are sent and its receives
  // as they are posted; receive k takes message k (receives match in posting order, as MPI's).
  void post(int src, int dst, void* staged, std::size_t bytes) {
    std::lock_guard lk(m_);
    if (aborted_) {
      release_(staged);
      throw_aborted();
    }
    auto& box = mail_[{src, dst}];
    box.msgs.emplace(box.sent++, Mail{staged, bytes});
    ++posted_;
    mail_cv_.notify_all();
  }
  /// A receive posted now: its ticket.
  std::uint64_t claim(int src, int dst) {
    std::lock_guard lk(m_);
    return mail_[{src, dst}].claimed++;
  }
  /// Message `ticket` from src if it has arrived, else {nullptr, 0} (never blocks); the caller
  /// owns the staged buffer.
  std::pair<void*, std::size_t> try_take(int src, int dst, std::uint64_t ticket) {
    std::lock_guard lk(m_);
    auto& box = mail_[{src, dst}];
    auto it = box.msgs.find(ticket);
    if (it == box.msgs.end()) {
      if (aborted_) throw_aborted();
      return {nullptr, 0};
    }
    const Mail m = it->second;
    box.msgs.erase(it);
    return {m.buf, m.bytes};
  }
  /// Block until message `ticket` from src arrives; the caller owns the staged buffer.
  std::pair<void*, std::size_t> take(int src, int dst, std::uint64_t ticket) {
    std::unique_lock lk(m_);
    auto& box = mail_[{src, dst}];
    mail_cv_.wait(lk, [&] { return box.msgs.count(ticket) > 0 || aborted_; });
    auto it = box.msgs.find(ticket);
    if (it == box.msgs.end()) throw_aborted();
    const Mail m = it->second;
    box.msgs.erase(it);
    return {m.buf, m.bytes};
  }
  /// Block until the next message (in posting order) from src arrives.
  std::pair<void*, std::size_t> take(int src, int dst) { return take(src, dst, claim(src, dst)); }
  [[nodiscard]] Release release() const { return release_; }

  /// Bookkeeping for tests: completed barriers, and messages posted but not yet taken.
  [[nodiscard]] std::uint64_t barriers() const {
    std::lock_guard lk(m_);
    return barriers_;
  }
  [[nodiscard]] std::size_t pending_messages() const {
    std::lock_guard lk(m_);
    std::size_t k = 0;
    for (const auto& [key, box] : mail_) k += box.msgs.size();
    return k;
  }

  // The collective in flight: one slot per rank.
  std::vector<const void*> send_;
  std::vector<void*> recv_;
  // all_to_allv: each rank's count arrays (size() entries each).
  std::vector<const std::size_t*> send_counts_, recv_counts_;
  // split(): each rank's (color, key), and the sub-world a color's leader made.
  std::vector<std::pair<int, int>> split_key_;
  std::vector<std::shared_ptr<World>> split_slot_;

 private:
  struct Mail {
    void* buf;
    std::size_t bytes;
  };
  [[noreturn]] static void throw_aborted() { throw CommAbortedError("SimComm: another rank failed; collective aborted"); }

  int n_;
  Release release_;
  mutable std::mutex m_;
  std::condition_variable cv_, mail_cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0, barriers_ = 0;
  std::size_t posted_ = 0;
  bool aborted_ = false;
  struct Mailbox {
    std::map<std::uint64_t, Mail> msgs;  // sent, not yet taken, by number
    std::uint64_t sent = 0, claimed = 0;
  };
  std::map<std::pair<int, int>, Mailbox> mail_;
  std::vector<std::shared_ptr<World>> children_;
};

}  // namespace sim

/// Host memory data movement: the protocol check that needs no GPU.
struct HostSimOps {
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void reduce(void* dst, const void* const* srcs, int nsrc, std::size_t n, DType t, ReduceOp op) {
    dispatch_host(t, [&]<class T>() {
      auto* out = static_cast<T*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        T v = static_cast<const T*>(srcs[0])[i];
        for (int s = 1; s < nsrc; ++s) {
          const T w = static_cast<const T*>(srcs[s])[i];
          v = op == ReduceOp::max ? (v < w ? w : v) : op == ReduceOp::min ? (w < v ? w : v) : static_cast<T>(v + w);
        }
        out[i] = v;
      }
    });
  }
  void fence() {}
  void* stage(std::size_t bytes) { return ::operator new(bytes ? bytes : 1); }
  static void release(void* p) { ::operator delete(p); }
};

/// One rank's handle on a simulated world. Cheap to copy (shares the world and the ops).
template <class Ops>
class SimComm {
 public:
  SimComm(std::shared_ptr<sim::World> w, int rank, std::shared_ptr<Ops> ops)
      : w_(std::move(w)), ops_(std::move(ops)), rank_(rank) {}

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return w_->size(); }
  [[nodiscard]] std::uintptr_t key() const { return reinterpret_cast<std::uintptr_t>(w_.get()); }
  [[nodiscard]] Ops& ops() const { return *ops_; }
  [[nodiscard]] const sim::World& world() const { return *w_; }

  /// Sub-groups, as MPI_Comm_split: the ranks that pass the same color form one group, ranked by
  /// (key, rank). Every rank calls it; the sub-world is aborted with this one. Its ranks share
  /// this rank's ops (its stream): a mesh axis runs on the rank's own stream.
  [[nodiscard]] SimComm split(int color, int key) {
    if (color < 0) throw CommError(shardalg::detail::cat("SimComm::split: color ", color, " is negative"));
    w_->split_key_[static_cast<std::size_t>(rank_)] = {color, key};
    w_->barrier();
    int leader = -1, sub_size = 0, sub_rank = 0;
    for (int r = 0; r < size(); ++r) {
      const auto [c, k] = w_->split_key_[static_cast<std::size_t>(r)];
      if (c != color) continue;
      if (leader < 0) leader = r;
      ++sub_size;
      if (k < key || (k == key && r < rank_)) ++sub_rank;
    }
    if (leader == rank_) {
      auto sub = std::make_shared<sim::World>(sub_size, w_->release());
      w_->adopt(sub);
      w_->split_slot_[static_cast<std::size_t>(rank_)] = std::move(sub);
    }
    w_->barrier();
    SimComm out(w_->split_slot_[static_cast<std::size_t>(leader)], sub_rank, ops_);
    w_->barrier();  // every rank has its copy before a later split reuses the slots
    if (leader == rank_) w_->split_slot_[static_cast<std::size_t>(rank_)].reset();
    return out;
  }

  void barrier() {
    ops_->fence();
    w_->barrier();
  }

  /// buf[n] := ⊕_ranks buf[n]. Rank r reduces chunk r of every buffer into its own buffer, then
  /// copies chunk s from rank s.
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    const std::size_t es = size_of(t);
    publish(buf, buf);
    const int P = size();
    {
      auto [lo, hi] = chunk(n, rank_);
      std::vector<const void*> srcs(P);
      for (int s = 0; s < P; ++s) srcs[s] = static_cast<const char*>(w_->recv_[s]) + lo * es;
      if (hi > lo) ops_->reduce(static_cast<char*>(buf) + lo * es, srcs.data(), P, hi - lo, t, op);
    }
    finish();
    for (int s = 0; s < P; ++s) {
      if (s == rank_) continue;
      auto [a, b] = chunk(n, s);
      ops_->copy(static_cast<char*>(buf) + a * es, static_cast<const char*>(w_->recv_[s]) + a * es, (b - a) * es);
    }
    finish();
  }

  /// recv[P·n] := send_0 ‖ … ‖ send_{P−1}; send may be recv + rank·n (in place).
  void all_gather(const void* send, void* recv, std::size_t n, DType t) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv);
    for (int s = 0; s < size(); ++s) {
      char* dst = static_cast<char*>(recv) + s * bytes;
      if (w_->send_[s] != dst) ops_->copy(dst, w_->send_[s], bytes);
    }
    finish();
  }

  /// recv[n] := ⊕_ranks send[rank·n, rank·n + n).
  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op) {
    const std::size_t off = static_cast<std::size_t>(rank_) * n * size_of(t);
    publish(send, recv);
    std::vector<const void*> srcs(size());
    for (int s = 0; s < size(); ++s) srcs[s] = static_cast<const char*>(w_->send_[s]) + off;
    if (n) ops_->reduce(recv, srcs.data(), size(), n, t, op);
    finish();
  }

  /// recv block s := block `rank` of rank s's send (blocks of n).
  void all_to_all(const void* send, void* recv, std::size_t n, DType t) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv);
    for (int s = 0; s < size(); ++s)
      ops_->copy(static_cast<char*>(recv) + s * bytes, static_cast<const char*>(w_->send_[s]) + rank_ * bytes, bytes);
    finish();
  }

  /// recv block s (recv_counts[s] elements) := block `rank` of rank s's send (send_counts[rank]
  /// of rank s); blocks contiguous in rank order. The ranks compare the published count arrays
  /// before any copy: a pair that disagrees is a CollectiveMismatchError on every rank.
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t) {
    w_->send_counts_[static_cast<std::size_t>(rank_)] = send_counts;  // free: the last readers passed finish()
    w_->recv_counts_[static_cast<std::size_t>(rank_)] = recv_counts;
    publish(send, recv);
    const int P = size();
    std::string msg = shardalg::detail::all_to_allv_mismatch(
        "SimComm", P, [&](int s, int r) { return w_->send_counts_[static_cast<std::size_t>(s)][r]; },
        [&](int r, int s) { return w_->recv_counts_[static_cast<std::size_t>(r)][s]; });
    if (!msg.empty()) {
      w_->barrier();  // every rank found it: meet before any rank's next call reuses the slots
      throw CollectiveMismatchError(std::move(msg));
    }
    const std::size_t es = size_of(t);
    std::size_t at = 0;
    for (int s = 0; s < P; ++s) {
      std::size_t from = 0;
      for (int k = 0; k < rank_; ++k) from += w_->send_counts_[static_cast<std::size_t>(s)][k];
      if (recv_counts[s])
        ops_->copy(static_cast<char*>(recv) + at * es, static_cast<const char*>(w_->send_[static_cast<std::size_t>(s)]) + from * es,
                   recv_counts[s] * es);
      at += recv_counts[s];
    }
    finish();
  }

  void broadcast(void* buf, std::size_t n, DType t, int root) {
    check_peer(root, "broadcast root");
    publish(buf, buf);
    if (rank_ != root) ops_->copy(buf, w_->send_[root], n * size_of(t));
    finish();
  }

  /// Buffered: the message is staged, so send returns before the matching recv (as ThreadComm).
  void send(const void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "send peer");
    const std::size_t bytes = n * size_of(t);
    void* staged = ops_->stage(bytes);
    try {
      ops_->copy(staged, buf, bytes);
      ops_->fence();
    } catch (...) {
      Ops::release(staged);
      throw;
    }
    w_->post(rank_, peer, staged, bytes);
  }
  void recv(void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "recv peer");
    const std::size_t bytes = n * size_of(t);
    auto [staged, got] = w_->take(peer, rank_);
    deliver(staged, got, buf, bytes, peer);
  }
  /// The send is staged (buffered): complete at once.
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer) {
    send(buf, n, t, peer);
    return {};
  }
  /// Posted now (it takes the peer's messages in posting order); test() takes the staged message
  /// if it has arrived (never blocks); wait() waits for it.
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "recv peer");
    return Request(PendingRecv{*this, buf, n, t, peer, w_->claim(peer, rank_)});
  }

 private:
  struct PendingRecv {
    SimComm c;
    void* buf;
    std::size_t n;
    DType t;
    int peer;
    std::uint64_t ticket;
    bool test() {
      auto [staged, got] = c.w_->try_take(peer, c.rank_, ticket);
      if (!staged) return false;
      c.deliver(staged, got, buf, n * size_of(t), peer);
      return true;
    }
    void wait() {
      auto [staged, got] = c.w_->take(peer, c.rank_, ticket);
      c.deliver(staged, got, buf, n * size_of(t), peer);
    }
  };
  void deliver(void* staged, std::size_t got, void* buf, std::size_t bytes, int peer) {
    std::unique_ptr<void, void (*)(void*)> hold(staged, Ops::release);
    if (got != bytes)
      throw CommError(shardalg::detail::cat("SimComm: rank ", rank_, " expected ", bytes, " bytes from rank ", peer,
                                            ", got ", got));
    ops_->copy(buf, staged, bytes);
    ops_->fence();
  }

  void publish(const void* send, void* recv) {
    ops_->fence();    // my inputs are complete before a peer reads them
    w_->barrier();    // the previous collective's readers are done with the slots
    w_->send_[rank_] = send;
    w_->recv_[rank_] = recv;
    w_->barrier();
  }
  void finish() {
    ops_->fence();  // my reads of peers' buffers and writes to mine are complete
    w_->barrier();
  }
  [[nodiscard]] std::pair<std::size_t, std::size_t> chunk(std::size_t n, int r) const {
    const auto P = static_cast<std::size_t>(size()), base = n / P, extra = n % P, rr = static_cast<std::size_t>(r);
    const std::size_t lo = rr * base + std::min(rr, extra);
    return {lo, lo + base + (rr < extra ? 1 : 0)};
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(shardalg::detail::cat("SimComm: ", what, " ", peer, " is outside a group of size ", size()));
  }

  std::shared_ptr<sim::World> w_;
  std::shared_ptr<Ops> ops_;
  int rank_;
};

static_assert(Communicator<SimComm<HostSimOps>> && VariableAllToAll<SimComm<HostSimOps>> &&
              AsyncPointToPoint<SimComm<HostSimOps>>);

/// Run fn(SimComm<Ops>&) on n threads (ranks 0..n−1); `setup(rank)` runs first on each rank's
/// thread and returns that rank's Ops (as shared_ptr) plus anything to keep alive for the body
/// (e.g. a CUDA context). Rethrows the first rank's own exception, like run_ranks.
template <class Ops, class Setup, class Fn>
void run_sim_ranks(int n, Setup&& setup, Fn&& fn) {
  if (n < 1) throw CommError(shardalg::detail::cat("run_sim_ranks: world size ", n, " must be at least 1"));
  auto world = std::make_shared<sim::World>(n, &Ops::release);
  shardalg::detail::run_threads(
      n,
      [&](int r) {
        auto env = setup(r);  // {std::shared_ptr<Ops>, keep-alive}
        SimComm<Ops> comm(world, r, std::get<0>(env));
        fn(comm);
        comm.ops().fence();
      },
      [&] { world->abort(); });
}

/// The host-memory simulated world: run_ranks with SimComm<HostSimOps>.
template <class Fn>
void run_host_sim_ranks(int n, Fn&& fn) {
  run_sim_ranks<HostSimOps>(
      n, [](int) { return std::tuple{std::make_shared<HostSimOps>(), 0}; }, std::forward<Fn>(fn));
}

}  // namespace shardalg::cuda
