// shardalg/comm/communicator.hpp — the one concept every communicator satisfies, and `Group`,
// the type-erased handle a Sharded tensor carries.
//
// A backend (SelfComm, ThreadComm, MpiComm, a CUDA/NCCL one) implements a handful of untyped
// collectives on raw buffers. Buffers are whatever the backend's storage hands out: host memory
// on the CPU, device memory for NCCL. Collectives are in place wherever the operation allows it.
//
//   all_reduce(buf, n)               buf[n] := Σ_ranks buf[n]                       (in place)
//   all_gather(send, recv, n)        recv[P·n] := send_0[n] ‖ send_1[n] ‖ …         (send may be recv + rank·n)
//   reduce_scatter(send, recv, n)    recv[n] := Σ_ranks send[rank·n … rank·n + n)
//   all_to_all(send, recv, n)        recv block s := block `rank` of rank s's send   (blocks of n)
//   broadcast(buf, n, root)          buf := root's buf
//   send / recv (point to point)     for pipeline stages
//
// Optionally (Group falls back where a communicator has not got them):
//
//   all_to_allv(send, sc, recv, rc)  counts per peer (arrays of P, elements); blocks contiguous in
//                                    rank order, displacements the prefix sums of the counts:
//                                    recv block s := block `rank` of rank s's send. rc[s] must
//                                    equal rank s's sc[rank] (VariableAllToAll; no fallback:
//                                    CommError naming the communicator)
//   isend / irecv → Request          point to point that returns before it completes
//                                    (AsyncPointToPoint); fallback: isend is the blocking send at
//                                    the call, irecv the blocking recv at the Request's wait()
//
// Optionally, a communicator may start an all-reduce without waiting for it (AsyncAllReduce):
//
//   iall_reduce(buf, n) → Request    buf is Σ_ranks once the Request completes; test() drives
//                                    progress, wait() finishes it. Group falls back to the
//                                    blocking call (and a completed Request) for the others.
//
// Every call may carry a `CallInfo` (the layouts it moves between); a decorator such as the
// ledger reads it, a plain backend ignores it.
//
// Optionally, a communicator names its kind (`name()`, e.g. "ThreadComm"), so that an error
// about two groups can tell them apart; Group forwards it ("a communicator" without one).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/comm/recorder.hpp"

namespace shardalg {

enum class ReduceOp { sum, max, min };

/// `halo`: a message of a halo exchange or reduction (collective/halo.hpp), recorded on the
/// sending side (its receive is a `recv`).
enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, recv, halo };

constexpr std::string_view to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::send: return "send";
    case CollectiveKind::recv: return "recv";
    case CollectiveKind::halo: return "halo";
  }
  return "?";
}

/// What a collective does in the algebra: the layouts it moves between. `verification` marks
/// traffic made by checking code (to_dense, replica checks): the ledger does not count it.
/// `scope` is the ledger's scope label, filled in by the ledger decorator (Ledgered) so that a
/// checked collective's fingerprint can name it; it is shown, never compared.
struct CallInfo {
  std::string_view layout_in = "-";
  std::string_view layout_out = "-";
  bool verification = false;
  std::string_view scope = {};
  bool halo = false;  // a send of a halo exchange: the ledger records it as kind halo
  /// Point to point: the global shape the message stands for (−1: not said), e.g. a pipeline
  /// activation's (seq, batch, hidden). A receive compares it with the send's when both say it
  /// (comm/p2p_check.hpp): two messages of equal bytes and different meaning do not match.
  std::array<std::int64_t, 3> dims{-1, -1, -1};
  /// An all_to_allv that carries an all_gather, reduce_scatter or all_to_all of uneven blocks
  /// (collective/uneven.hpp) names that collective and the whole matrix's elements here: a ledger
  /// records it as that collective of that size, as it records the equal-block one.
  std::optional<CollectiveKind> uneven_as = std::nullopt;
  std::size_t uneven_elements = 0;
};

template <class C>
concept Communicator = requires(C& c, const C& cc, void* p, const void* cp, std::size_t n, DType t,
                                ReduceOp op, int peer) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  // Identity of the group: equal for two handles on the same group within one process.
  { cc.key() } -> std::convertible_to<std::uintptr_t>;
  c.all_reduce(p, n, t, op);
  c.all_gather(cp, p, n, t);
  c.reduce_scatter(cp, p, n, t, op);
  c.all_to_all(cp, p, n, t);
  c.broadcast(p, n, t, peer);
  c.send(cp, n, t, peer);
  c.recv(p, n, t, peer);
  c.barrier();
};

/// A collective in flight. `test()` drives its progress and says whether it has completed;
/// `wait()` blocks until it has. A default-constructed Request is complete. Move-only.
///
/// Destroying (or assigning over) an incomplete Request:
///   - normally, waits for it first, so its buffer is never freed under a transfer. A failure of
///     that wait (a watchdog's timeout) cannot leave a destructor: the backend is told
///     (`dropped`): ThreadComm names it in the abort every rank sees next, MpiComm prints one line
///     and aborts the job (its communicator is unusable after a timeout). Call wait() to see it.
///   - while an exception unwinds the stack (this rank failed), cancels it instead (`cancel`):
///     waiting there could deadlock — the peer may be waiting for this failing rank — and hide
///     the error. A cancelled receive never writes into its buffer afterwards; on MPI a send is
///     released to complete on its own (MPI_Request_free). A communicator that cannot cancel
///     (no `cancel()`) waits, as before.
class Request {
 public:
  Request() = default;
  /// `Impl` has `bool test()` and `void wait()`; optionally `void cancel() noexcept` and
  /// `void dropped(const std::exception_ptr&) noexcept` (see above).
  template <class Impl>
    requires(!std::same_as<std::remove_cvref_t<Impl>, Request>)
  explicit Request(Impl impl) : impl_(std::make_unique<Model<Impl>>(std::move(impl))) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      drop();
      impl_ = std::move(o.impl_);
    }
    return *this;
  }
  ~Request() { drop(); }

  [[nodiscard]] bool done() const { return impl_ == nullptr; }
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return done();
  }
  void wait() {
    if (!impl_) return;
    auto impl = std::move(impl_);
    impl->wait();
  }

 private:
  // Where no exception may leave (destructor, move-assignment): see the class comment.
  void drop() noexcept {
    if (!impl_) return;
    auto impl = std::move(impl_);
    if (std::uncaught_exceptions() > 0) {
      impl->cancel();
      return;
    }
    try {
      impl->wait();
    } catch (...) {
      impl->dropped(std::current_exception());
    }
  }
  struct Iface {
    virtual ~Iface() = default;
    virtual bool test() = 0;
    virtual void wait() = 0;
    virtual void cancel() noexcept = 0;
    virtual void dropped(const std::exception_ptr& e) noexcept = 0;
  };
  template <class Impl>
  struct Model final : Iface {
    Impl impl;
    explicit Model(Impl i) : impl(std::move(i)) {}
    bool test() override { return impl.test(); }
    void wait() override { impl.wait(); }
    void cancel() noexcept override {
      if constexpr (requires { impl.cancel(); }) {
        impl.cancel();
      } else {
        try {
          impl.wait();
        } catch (...) {
        }
      }
    }
    void dropped(const std::exception_ptr& e) noexcept override {
      if constexpr (requires { impl.dropped(e); }) impl.dropped(e);
    }
  };
  std::unique_ptr<Iface> impl_;
};

/// A communicator with the all-to-all of variable counts: send_counts[s] elements of `send` go to
/// rank s (blocks contiguous in rank order), recv_counts[s] elements arrive from rank s.
template <class C>
concept VariableAllToAll = requires(C& c, const void* cp, void* p, const std::size_t* k, DType t) {
  c.all_to_allv(cp, k, p, k, t);
};

/// A communicator whose point-to-point calls can return before they complete.
template <class C>
concept AsyncPointToPoint = requires(C& c, const void* cp, void* p, std::size_t n, DType t, int peer) {
  { c.isend(cp, n, t, peer) } -> std::same_as<Request>;
  { c.irecv(p, n, t, peer) } -> std::same_as<Request>;
};

/// A communicator that can start an all-reduce and return before it completes.
template <class C>
concept AsyncAllReduce = requires(C& c, void* p, std::size_t n, DType t, ReduceOp op) {
  { c.iall_reduce(p, n, t, op) } -> std::same_as<Request>;
};

/// Whether a communicator (or a decorator around one) really starts all-reduces asynchronously.
template <class C>
constexpr bool async_all_reduce(const C& c) {
  if constexpr (requires { c.async_all_reduce(); }) return c.async_all_reduce();
  else return AsyncAllReduce<C>;
}

/// A communicator that understands CallInfo (a decorator) has these overloads too.
template <class C>
concept InfoAwareCommunicator =
    Communicator<C> && requires(C& c, void* p, std::size_t n, DType t, ReduceOp op, CallInfo info) {
      c.all_reduce(p, n, t, op, info);
    };

/// Type-erased, shared handle on a communicator. Copies refer to the same communicator. A
/// default-constructed Group is empty: everything but valid(), recorder(), name() and same_group
/// throws EmptyTensorError naming the call.
class Group {
 public:
  Group() = default;

  template <Communicator C>
    requires(!std::same_as<std::remove_cvref_t<C>, Group>)
  Group(C comm) : impl_(std::make_shared<Model<C>>(std::move(comm))) {}  // NOLINT: implicit by design

  [[nodiscard]] bool valid() const { return impl_ != nullptr; }
  [[nodiscard]] int rank() const { return get("rank").rank(); }
  [[nodiscard]] int size() const { return get("size").size(); }
  [[nodiscard]] std::uintptr_t key() const { return get("key").key(); }
  /// What records this group's traffic (a Ledger, observe/ledger.hpp), or nullptr.
  [[nodiscard]] Recorder* recorder() const { return impl_ ? impl_->recorder() : nullptr; }
  /// The communicator's kind ("ThreadComm", "SelfComm", …); "a communicator" when it does not
  /// say, "an empty Group" for an empty handle. A ledgered handle is named by what it decorates.
  [[nodiscard]] std::string name() const { return impl_ ? impl_->name() : std::string("an empty Group"); }
  /// The mesh axis this handle is the group of ("dp", "tp", …; observe/ledger.hpp records it with
  /// each collective), or "" for a whole world.
  [[nodiscard]] std::string axis() const { return impl_ ? impl_->axis() : std::string(); }

  /// MPI_Comm_split's contract, for any backend that can split (ThreadComm, MpiComm, SelfComm,
  /// the simulated CUDA world): a collective over this group; the ranks passing one `color` form
  /// a sub-group ranked by (`key`, rank here). `axis` names the sub-group (Group::axis). A
  /// ledgered handle splits into ledgered handles on the same ledger. A communicator without
  /// split() raises CommError naming it.
  [[nodiscard]] Group split(int color, int key, std::string_view axis = {}) const {
    return get("split").split(color, key, axis);
  }

  friend bool same_group(const Group& a, const Group& b) {
    return a.impl_ && b.impl_ && a.impl_->key() == b.impl_->key() && a.size() == b.size();
  }

  // Untyped interface: this makes Group a Communicator itself.
  void all_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    get("all_reduce").all_reduce(buf, n, t, op, info);
  }
  void all_gather(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    get("all_gather").all_gather(send, recv, n, t, info);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t n, DType t, ReduceOp op,
                      const CallInfo& info = {}) {
    get("reduce_scatter").reduce_scatter(send, recv, n, t, op, info);
  }
  void all_to_all(const void* send, void* recv, std::size_t n, DType t, const CallInfo& info = {}) {
    get("all_to_all").all_to_all(send, recv, n, t, info);
  }
  void broadcast(void* buf, std::size_t n, DType t, int root, const CallInfo& info = {}) {
    get("broadcast").broadcast(buf, n, t, root, info);
  }
  void send(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    get("send").send(buf, n, t, peer, info);
  }
  void recv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    get("recv").recv(buf, n, t, peer, info);
  }
  void barrier() { get("barrier").barrier(); }

  /// Variable all-to-all: send_counts[s] elements (of `send`, blocks contiguous in rank order,
  /// displacements = prefix sums) go to rank s; recv_counts[s] elements arrive from rank s into
  /// `recv` (likewise contiguous). Both arrays have size() entries; recv_counts[s] must equal rank
  /// s's send_counts[rank()] (checked mode compares: CollectiveMismatchError). send and recv must
  /// not overlap. A communicator without it: CommError naming it.
  void all_to_allv(const void* send, const std::size_t* send_counts, void* recv, const std::size_t* recv_counts,
                   DType t, const CallInfo& info = {}) {
    get("all_to_allv").all_to_allv(send, send_counts, recv, recv_counts, t, info);
  }
  /// Start a send of buf[n] to `peer`; buf must stay alive and unchanged until the Request
  /// completes. Without an asynchronous backend: the blocking send, at this call.
  [[nodiscard]] Request isend(const void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {}) {
    return get("isend").isend(buf, n, t, peer, info);
  }
  /// Post a receive of buf[n] from `peer`; buf holds the message once the Request completes.
  /// Without an asynchronous backend: the blocking recv, run at the Request's wait() (or its
  /// destruction), so that posting receives before sends never deadlocks.
  [[nodiscard]] Request irecv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info = {});
  /// Whether isend/irecv really return before the transfer completes.
  [[nodiscard]] bool async_p2p() const { return get("async_p2p").async_p2p(); }

  /// Start buf[n] := Σ_ranks buf[n]; the result is there once the Request completes. Every rank
  /// must start it (it matches the other ranks' iall_reduce, not their all_reduce). Without an
  /// asynchronous backend this runs the blocking all-reduce and returns a completed Request.
  [[nodiscard]] Request iall_reduce(void* buf, std::size_t n, DType t, ReduceOp op, const CallInfo& info = {}) {
    return get("iall_reduce").iall_reduce(buf, n, t, op, info);
  }
  /// Whether iall_reduce really returns before the all-reduce completes.
  [[nodiscard]] bool async_all_reduce() const { return get("async_all_reduce").async_all_reduce(); }

  // Typed conveniences.
  template <class T>
  void all_reduce(T* buf, std::size_t n, ReduceOp op = ReduceOp::sum, const CallInfo& info = {}) {
    all_reduce(static_cast<void*>(buf), n, dtype_of<T>, op, info);
  }
  template <class T>
  void all_gather(const T* send, T* recv, std::size_t n, const CallInfo& info = {}) {
    all_gather(static_cast<const void*>(send), static_cast<void*>(recv), n, dtype_of<T>, info);
  }
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::size_t n, ReduceOp op = ReduceOp::sum,
                      const CallInfo& info = {}) {
    reduce_scatter(static_cast<const void*>(send), static_cast<void*>(recv), n, dtype_of<T>, op, info);
  }
  template <class T>
  void all_to_all(const T* send, T* recv, std::size_t n, const CallInfo& info = {}) {
    all_to_all(static_cast<const void*>(send), static_cast<void*>(recv), n, dtype_of<T>, info);
  }
  template <class T>
  void broadcast(T* buf, std::size_t n, int root, const CallInfo& info = {}) {
    broadcast(static_cast<void*>(buf), n, dtype_of<T>, root, info);
  }
  template <class T>
  void all_to_allv(const T* send, const std::size_t* send_counts, T* recv, const std::size_t* recv_counts,
                   const CallInfo& info = {}) {
    all_to_allv(static_cast<const void*>(send), send_counts, static_cast<void*>(recv), recv_counts, dtype_of<T>, info);
  }

 private:
  struct DeferredRecv;  // irecv's fallback (defined below Group)

  struct Iface {
    virtual ~Iface() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::uintptr_t key() const = 0;
    virtual Recorder* recorder() = 0;
    virtual std::string name() const = 0;
    virtual std::string axis() const = 0;
    virtual Group split(int, int, std::string_view) = 0;
    virtual void all_reduce(void*, std::size_t, DType, ReduceOp, const CallInfo&) = 0;
    virtual void all_gather(const void*, void*, std::size_t, DType, const CallInfo&) = 0;
    virtual void reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp, const CallInfo&) = 0;
    virtual void all_to_all(const void*, void*, std::size_t, DType, const CallInfo&) = 0;
    virtual void broadcast(void*, std::size_t, DType, int, const CallInfo&) = 0;
    virtual void send(const void*, std::size_t, DType, int, const CallInfo&) = 0;
    virtual void recv(void*, std::size_t, DType, int, const CallInfo&) = 0;
    virtual void barrier() = 0;
    virtual Request iall_reduce(void*, std::size_t, DType, ReduceOp, const CallInfo&) = 0;
    virtual bool async_all_reduce() const = 0;
    virtual void all_to_allv(const void*, const std::size_t*, void*, const std::size_t*, DType, const CallInfo&) = 0;
    virtual Request isend(const void*, std::size_t, DType, int, const CallInfo&) = 0;
    virtual Request irecv(void*, std::size_t, DType, int, const CallInfo&) = 0;
    virtual bool async_p2p() const = 0;
  };

  template <class C>
  struct Model final : Iface {
    C c;
    explicit Model(C comm) : c(std::move(comm)) {}
    static constexpr bool aware = InfoAwareCommunicator<C>;
    int rank() const override { return c.rank(); }
    int size() const override { return c.size(); }
    std::uintptr_t key() const override { return c.key(); }
    Recorder* recorder() override {
      if constexpr (requires { c.recorder(); }) return c.recorder();
      else return nullptr;
    }
    std::string name() const override {
      if constexpr (requires { c.name(); }) return std::string(c.name());
      else return "a communicator";
    }
    std::string axis() const override {
      if constexpr (requires { c.axis(); }) return std::string(c.axis());
      else return {};
    }
    Group split(int color, int key, std::string_view axis) override;
    void all_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i) override {
      if constexpr (aware) c.all_reduce(b, n, t, op, i);
      else c.all_reduce(b, n, t, op);
    }
    void all_gather(const void* s, void* r, std::size_t n, DType t, const CallInfo& i) override {
      if constexpr (aware) c.all_gather(s, r, n, t, i);
      else c.all_gather(s, r, n, t);
    }
    void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op,
                        const CallInfo& i) override {
      if constexpr (aware) c.reduce_scatter(s, r, n, t, op, i);
      else c.reduce_scatter(s, r, n, t, op);
    }
    void all_to_all(const void* s, void* r, std::size_t n, DType t, const CallInfo& i) override {
      if constexpr (aware) c.all_to_all(s, r, n, t, i);
      else c.all_to_all(s, r, n, t);
    }
    void broadcast(void* b, std::size_t n, DType t, int root, const CallInfo& i) override {
      if constexpr (aware) c.broadcast(b, n, t, root, i);
      else c.broadcast(b, n, t, root);
    }
    void send(const void* b, std::size_t n, DType t, int peer, const CallInfo& i) override {
      if constexpr (aware) c.send(b, n, t, peer, i);
      else c.send(b, n, t, peer);
    }
    void recv(void* b, std::size_t n, DType t, int peer, const CallInfo& i) override {
      if constexpr (aware) c.recv(b, n, t, peer, i);
      else c.recv(b, n, t, peer);
    }
    void barrier() override { c.barrier(); }
    Request iall_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i) override {
      if constexpr (requires { c.iall_reduce(b, n, t, op, i); }) {
        return c.iall_reduce(b, n, t, op, i);
      } else if constexpr (AsyncAllReduce<C>) {
        return c.iall_reduce(b, n, t, op);
      } else {
        all_reduce(b, n, t, op, i);
        return {};
      }
    }
    bool async_all_reduce() const override { return shardalg::async_all_reduce(c); }
    void all_to_allv(const void* s, const std::size_t* sc, void* r, const std::size_t* rc, DType t,
                     const CallInfo& i) override {
      if constexpr (requires { c.all_to_allv(s, sc, r, rc, t, i); }) c.all_to_allv(s, sc, r, rc, t, i);
      else if constexpr (VariableAllToAll<C>) c.all_to_allv(s, sc, r, rc, t);
      else throw CommError(shardalg::detail::cat("Group::all_to_allv: ", name(), " has no all_to_allv"));
    }
    Request isend(const void* b, std::size_t n, DType t, int peer, const CallInfo& i) override {
      if constexpr (requires { c.isend(b, n, t, peer, i); }) {
        return c.isend(b, n, t, peer, i);
      } else if constexpr (AsyncPointToPoint<C>) {
        return c.isend(b, n, t, peer);
      } else {
        send(b, n, t, peer, i);
        return {};
      }
    }
    Request irecv(void* b, std::size_t n, DType t, int peer, const CallInfo& i) override {
      if constexpr (requires { c.irecv(b, n, t, peer, i); }) {
        return c.irecv(b, n, t, peer, i);
      } else if constexpr (AsyncPointToPoint<C>) {
        return c.irecv(b, n, t, peer);
      } else {  // unreachable: Group::irecv defers the recv itself when async_p2p() is false
        recv(b, n, t, peer, i);
        return {};
      }
    }
    bool async_p2p() const override {
      if constexpr (requires { c.async_p2p(); }) return c.async_p2p();
      else return AsyncPointToPoint<C>;
    }
  };

  /// The communicator, or EmptyTensorError naming the call on an empty handle.
  Iface& get(std::string_view call) const {
    if (!impl_) [[unlikely]]
      throw EmptyTensorError(detail::cat("Group::", call,
                                         ": the handle is empty (a default-constructed Group or Sharded: no "
                                         "communicator)"));
    return *impl_;
  }

  std::shared_ptr<Iface> impl_;
};

static_assert(Communicator<Group>);

/// irecv's fallback: the blocking recv when the Request is waited for (the Group copy keeps the
/// communicator alive; the layouts are copied, the caller's views may be gone by then).
struct Group::DeferredRecv {
  Group g;
  void* buf;
  std::size_t n;
  DType t;
  int peer;
  std::string in, out;
  bool verification;
  std::array<std::int64_t, 3> dims;
  bool test() { return false; }  // nothing runs in the background: only wait() receives
  void wait() {
    CallInfo info{in, out, verification};
    info.dims = dims;
    g.recv(buf, n, t, peer, info);
  }
  void cancel() noexcept {}  // nothing was posted
};

inline Request Group::irecv(void* buf, std::size_t n, DType t, int peer, const CallInfo& info) {
  auto& c = get("irecv");
  if (c.async_p2p()) return c.irecv(buf, n, t, peer, info);
  return Request(DeferredRecv{*this, buf, n, t, peer, std::string(info.layout_in), std::string(info.layout_out),
                              info.verification, info.dims});
}

template <class C>
Group Group::Model<C>::split(int color, int key, std::string_view axis) {
  if constexpr (requires { c.split(color, key, axis); }) {
    return Group(c.split(color, key, axis));  // a decorator that keeps the axis name (Ledgered)
  } else if constexpr (requires { c.split(color, key); }) {
    return Group(c.split(color, key));
  } else {
    throw CommError(detail::cat("Group::split: ", name(), " cannot split into sub-groups"));
  }
}

/// A scope label on `g`'s recorder for as long as the result lives: on a ledgered group it labels
/// the collectives that run meanwhile; on a plain one it does nothing.
///   auto s = shardalg::scope(x.group(), "mlp.fwd");
[[nodiscard]] inline RecorderScope scope(const Group& g, std::string label) {
  return RecorderScope(g.recorder(), std::move(label));
}

}  // namespace shardalg
