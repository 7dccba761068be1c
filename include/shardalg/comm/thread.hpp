// shardalg/comm/thread.hpp — N simulated ranks in one process, one thread each.
//
//   run_ranks(4, [&](ThreadComm& comm) { ... });   // the body runs on 4 threads, ranks 0..3
//
// The default for tests, examples and teaching. Collectives use the single address space: every
// rank publishes its buffer pointers, then reads the others' memory directly; nothing is copied
// through a transport. Reductions add in rank order 0, 1, …, P−1 on every rank, so all ranks get
// bit-identical results (the property a replicated value needs).
//
// If one rank throws, the world is aborted: ranks waiting in a collective get a CommError, and
// run_ranks rethrows the first rank's original exception once every thread has ended.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/core/errors.hpp"
#include "shardalg/core/threads.hpp"

namespace shardalg {

namespace detail {

/// The state the ranks of one thread world share.
class ThreadWorld {
 public:
  explicit ThreadWorld(int n)
      : send_(n), recv_(n), n_(n), spin_(static_cast<unsigned>(n) <= std::thread::hardware_concurrency()) {}

  int size() const { return n_; }

  /// A generation barrier that an aborting rank can break. When the ranks fit on the cores it
  /// spins briefly before blocking (a futex wake costs microseconds; collectives take three).
  void barrier() {
    std::unique_lock lk(m_);
    if (aborted_) throw_aborted();
    const auto gen = generation_.load(std::memory_order_relaxed);
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
    cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != gen || aborted_; });
    if (generation_.load(std::memory_order_acquire) == gen) throw_aborted();
  }

  void abort() {
    std::lock_guard lk(m_);
    aborted_ = true;
    aborted_flag_.store(true);
    cv_.notify_all();
    mail_cv_.notify_all();
  }

  // Published pointers of the collective in flight (one slot per rank).
  std::vector<const void*> send_;
  std::vector<void*> recv_;

  void post(int src, int dst, const void* buf, std::size_t bytes) {
    std::lock_guard lk(m_);
    if (aborted_) throw_aborted();
    auto& q = mail_[{src, dst}];
    q.emplace_back(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
    mail_cv_.notify_all();
  }
  void take(int src, int dst, void* buf, std::size_t bytes) {
    std::unique_lock lk(m_);
    auto& q = mail_[{src, dst}];
    mail_cv_.wait(lk, [&] { return !q.empty() || aborted_; });
    if (q.empty()) throw_aborted();
    if (q.front().size() != bytes)
      throw CommError(detail::cat("ThreadComm: rank ", dst, " expected ", bytes, " bytes from rank ",
                                  src, ", got ", q.front().size()));
    std::memcpy(buf, q.front().data(), bytes);
    q.pop_front();
  }

 private:
  [[noreturn]] static void throw_aborted() {
    throw CommError("ThreadComm: another rank failed; collective aborted");
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
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail_;
};

/// acc[i] := acc[i] ∘ x[i], one loop per operation so that each vectorises.
template <class T>
void accumulate(T* acc, const T* x, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
      break;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
      break;
    default:
      for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

/// Elements per tile of a reduction: the running sum stays in L1.
inline constexpr std::size_t reduce_tile_bytes = 16384;

}  // namespace detail

/// One rank's handle on a thread world. Cheap to copy.
class ThreadComm {
 public:
  ThreadComm(std::shared_ptr<detail::ThreadWorld> w, int rank) : w_(std::move(w)), rank_(rank) {}

  int rank() const { return rank_; }
  int size() const { return w_->size(); }
  std::uintptr_t key() const { return reinterpret_cast<std::uintptr_t>(w_.get()); }
  static constexpr std::string_view name() { return "ThreadComm"; }
  void barrier() { w_->barrier(); }

  // buf[n] := Σ_ranks buf[n] in one phase: rank r owns chunk r; tile by tile it sums chunk r of
  // every rank's buffer in rank order 0, 1, …, P−1 and writes the sum into every rank's buffer.
  // Nobody else reads or writes chunk r, so no copy of the input is needed, every rank ends with
  // the same bits, and each element is read P times and written P times in all (the minimum).
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
    dispatch_host(t, [&]<class T>() {
      publish(buf, buf);
      const int P = size();
      constexpr std::size_t tile = detail::reduce_tile_bytes / sizeof(T);
      T acc[tile];
      auto [lo, hi] = chunk(n, rank_);
      for (std::size_t t0 = lo; t0 < hi; t0 += tile) {
        const std::size_t len = std::min(tile, hi - t0);
        std::copy_n(static_cast<const T*>(w_->recv_[0]) + t0, len, acc);
        for (int s = 1; s < P; ++s) detail::accumulate(acc, static_cast<const T*>(w_->recv_[s]) + t0, len, op);
        for (int s = 0; s < P; ++s) std::copy_n(acc, len, static_cast<T*>(w_->recv_[s]) + t0);
      }
      w_->barrier();
    });
  }

  void all_gather(const void* send, void* recv, std::size_t n, DType t) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv);
    for (int s = 0; s < size(); ++s) {
      char* dst = static_cast<char*>(recv) + s * bytes;
      if (w_->send_[s] != dst) std::memcpy(dst, w_->send_[s], bytes);
    }
    w_->barrier();
  }

  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op) {
    dispatch_host(t, [&]<class T>() {
      publish(send, recv);
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
      w_->barrier();
    });
  }

  void all_to_all(const void* send, void* recv, std::size_t n, DType t) {
    const std::size_t bytes = n * size_of(t);
    publish(send, recv);
    for (int s = 0; s < size(); ++s)
      std::memcpy(static_cast<char*>(recv) + s * bytes,
                  static_cast<const char*>(w_->send_[s]) + rank_ * bytes, bytes);
    w_->barrier();
  }

  void broadcast(void* buf, std::size_t n, DType t, int root) {
    check_peer(root, "broadcast root");
    publish(buf, buf);
    if (rank_ != root) std::memcpy(buf, w_->send_[root], n * size_of(t));
    w_->barrier();
  }

  void send(const void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "send peer");
    w_->post(rank_, peer, buf, n * size_of(t));
  }
  void recv(void* buf, std::size_t n, DType t, int peer) {
    check_peer(peer, "recv peer");
    w_->take(peer, rank_, buf, n * size_of(t));
  }

 private:
  // Publish this rank's buffers and wait until every rank has published.
  void publish(const void* send, void* recv) {
    w_->barrier();  // the previous collective's readers are done with the slots
    w_->send_[rank_] = send;
    w_->recv_[rank_] = recv;
    w_->barrier();
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

static_assert(Communicator<ThreadComm>);

namespace detail {
/// Run `body(r)` for r = 0..n−1 on n threads (rank 0 on the caller's). When a rank throws,
/// `abort()` releases the others; afterwards the first rank's own exception is rethrown, in
/// preference to the CommErrors ("another rank failed") that the abort caused.
template <class Body, class Abort>
void run_threads(int n, Body&& body, Abort&& abort) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<char> aborted_only(n, 0);
  auto guarded = [&](int r) {
    try {
      body(r);
    } catch (const CommError&) {
      errors[r] = std::current_exception();
      aborted_only[r] = 1;
      abort();
    } catch (...) {
      errors[r] = std::current_exception();
      abort();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (int r = 1; r < n; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (errors[r] && !aborted_only[r]) std::rethrow_exception(errors[r]);
  for (int r = 0; r < n; ++r)
    if (errors[r]) std::rethrow_exception(errors[r]);
}
}  // namespace detail

/// Run `fn(ThreadComm&)` on `n` threads, ranks 0..n−1; rethrow the first rank's exception.
/// For the duration of the run the local GEMM gets local_threads_for(n) threads per rank.
template <class Fn>
void run_ranks(int n, Fn&& fn) {
  if (n < 1) throw CommError(detail::cat("run_ranks: world size ", n, " must be at least 1"));
  struct Budget {
    int saved = local_threads();
    explicit Budget(int n) { set_local_threads(local_threads_for(n)); }
    ~Budget() { set_local_threads(saved); }
  } budget(n);
  auto world = std::make_shared<detail::ThreadWorld>(n);
  detail::run_threads(
      n,
      [&](int r) {
        ThreadComm comm(world, r);
        fn(comm);
      },
      [&] { world->abort(); });
}

}  // namespace shardalg
