// shardalg/pipeline/p2p.hpp — point to point between pipeline stages: a stage's activation (or
// its gradient) X[L] on the tp group, sent to the neighbouring stage on the pp axis.
//
//   stage s on pp rank r, tp rank t   ──X[L] block of (r, t)──▶   stage s+1 on pp rank r+1, tp rank t
//
// Each tp rank sends its own block to the tp rank of the same coordinate on the next stage, and
// the receiver rebuilds X[L] with the same global shape on its tp group: the layout is kept
// across the send. X[R] (no sequence parallelism) is the whole T×h on every tp rank; X[Row]
// (sequence parallelism) is T/t rows per tp rank, so each sends only its shard; X[C] h/t columns.
//
// Variable sequence lengths (Megatron-LM's variable_seq_lengths, the seed's _communicate_shapes):
// each message is preceded by its global shape, three int64 (seq, batch, hidden), and the
// receiver sizes its buffer from it. Off, the receiver passes the shape it expects and no shape
// traffic moves. The ledger records both (send / recv entries with the peer rank: the shape as
// 3 × i64 in the sub-scope "shape", the block with its layout L → L).
//
// What arrives is compared with what the receiver expects, so that two stages that disagree on
// the micro-batch (sequences of 8 against two of 4: the same bytes) fail instead of computing:
//   - the block's message carries its layout and global shape (CallInfo::dims; comm/p2p_check.hpp):
//     the communicator compares them with the receive's (ThreadComm always, MpiComm in checked
//     mode) — CollectiveMismatchError, as a shape message read as a block is (i64 against f64);
//   - with variable lengths, the shape that arrives is compared with the receiver's expected
//     shape whenever it passes one (the Executor always does: every stage knows its micro-batches)
//     — PipelineError naming both.
//
// Three ways to move messages:
//
//   send_async / Inbound      one message, non-blocking: send_async posts isend (shape, then the
//                             block) and returns its Outbound (keep it alive until done());
//                             Inbound::post posts the receive (the shape's, or the block's),
//                             wait() finishes it. Inbound::recv_now is the blocking receive.
//   communicate(…)            Megatron's _communicate: to and from prev and next in one call.
//                             Batched (default): every receive then every send posted at once
//                             (MPI_Irecv/MPI_Isend; never a deadlock, whatever the neighbours'
//                             order), then all waited. Ring exchange (P2POptions::ring_exchange,
//                             the seed's use_ring_exchange_p2p): synchronous, two ring shifts —
//                             send next / receive prev, then send prev / receive next — each
//                             complete before the call returns, no request handles; with
//                             variable lengths the shapes go first the same way (the seed's ring
//                             exchange of shape tensors).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/pipeline/errors.hpp"

namespace shardalg::pipeline {

/// The global shape of an activation [seq·batch, hidden] (tokens batch-major, as the GPT's):
/// Megatron's 3-integer shape message (seq_len, batch, hidden).
struct ActShape {
  std::int64_t seq = 0;
  std::int64_t batch = 0;
  std::int64_t hidden = 0;
  [[nodiscard]] Index rows() const { return seq * batch; }
  [[nodiscard]] Index cols() const { return hidden; }
  friend bool operator==(const ActShape&, const ActShape&) = default;
};

struct P2POptions {
  bool variable_seq_lengths = false;  // send the 3-integer shape before each block
  bool ring_exchange = false;         // communicate(): two synchronous ring shifts instead of a batch
};

namespace detail {
using ::shardalg::detail::cat;

/// The local block shape of X[L] of `s` on tp rank `r` of `t` (its balanced block: the sender, the
/// same tp rank of the previous stage, holds the same block).
template <class L>
std::pair<Index, Index> block_shape(const ActShape& s, int t, int r) {
  if (s.seq < 0 || s.batch < 0 || s.hidden < 0)
    throw PipelineError(cat("pipeline p2p: shape (seq ", s.seq, ", batch ", s.batch, ", hidden ", s.hidden,
                            ") has a negative size"));
  return local_shape(L::kind, s.rows(), s.cols(), t, r);
}
/// The block's CallInfo: its layout and global shape (compared by the receiving communicator).
inline CallInfo block_info(std::string_view layout, const ActShape& s) {
  CallInfo i{layout, layout};
  i.dims = {s.seq, s.batch, s.hidden};
  return i;
}
inline std::string shape_text(const ActShape& s) {
  return cat("(seq ", s.seq, ", batch ", s.batch, ", hidden ", s.hidden, ")");
}
}  // namespace detail

/// A message sent with send_async: its buffers live here until done() (the block is shared with
/// the caller, who may drop its own reference at once: output deallocation).
template <class T, class B = CpuBackend>
struct Outbound {
  std::array<std::int64_t, 3> shape{};
  std::shared_ptr<const typename B::template matrix<T>> block;
  Request shape_req, block_req;
  /// Drives progress; true once both sends have completed.
  bool test() {
    const bool a = shape_req.test();
    const bool b = block_req.test();
    return a && b;
  }
  void wait() {
    shape_req.wait();
    block_req.wait();
  }
  [[nodiscard]] std::size_t bytes() const {
    return block ? static_cast<std::size_t>(block->size()) * sizeof(T) : 0;
  }
};

/// Start sending this rank's block of `x` (global shape `shape`) to `peer` on `pp`: the shape
/// first when variable lengths are on. `block` is x's local block, shared (kept alive by the
/// returned Outbound until its sends complete).
template <class T, class L, class B>
Outbound<T, B> send_async(Group& pp, const Sharded<T, L, B>& x, std::shared_ptr<const typename B::template matrix<T>> block,
                          int peer, const ActShape& shape, const P2POptions& o) {
  if (x.rows() != shape.rows() || x.cols() != shape.cols())
    throw PipelineError(detail::cat("pipeline p2p: sending a ", x.rows(), "x", x.cols(), " tensor as shape (seq ",
                                    shape.seq, ", batch ", shape.batch, ", hidden ", shape.hidden, ")"));
  Outbound<T, B> out;
  out.shape = {shape.seq, shape.batch, shape.hidden};
  out.block = std::move(block);
  if (o.variable_seq_lengths) {
    auto s = scope(pp, "shape");
    out.shape_req = pp.isend(out.shape.data(), 3, DType::i64, peer);
  }
  out.block_req = pp.isend(out.block->data(), static_cast<std::size_t>(out.block->size()), dtype_of<T>, peer,
                           detail::block_info(L::notation, shape));
  return out;
}
template <class T, class L, class B>
Outbound<T, B> send_async(Group& pp, const Sharded<T, L, B>& x, int peer, const ActShape& shape, const P2POptions& o) {
  return send_async(pp, x, std::make_shared<const typename B::template matrix<T>>(x.local()), peer, shape, o);
}

/// One message to receive: X[L] from `peer` on `pp`, rebuilt on `tp`. post() starts it without
/// blocking (the shape's receive, or the block's when the shape is known); wait() finishes it.
/// `expected`: the shape the receiver expects — required without variable lengths; with them,
/// optional, and compared with the shape that arrives (PipelineError when they differ).
/// Between two messages from one peer, the block's receive of the first must be posted before
/// anything of the second (the messages match in order): post_block() does that, waiting for
/// the first's 3 integers when needed.
template <class T, class L, class B = CpuBackend>
class Inbound {
 public:
  using X = Sharded<T, L, B>;
  Inbound(Group pp, Group tp, int peer, std::optional<ActShape> expected, const P2POptions& o)
      : pp_(std::move(pp)), tp_(std::move(tp)), peer_(peer), variable_(o.variable_seq_lengths), expected_(expected),
        shape_(expected) {
    if (!variable_ && !shape_)
      throw PipelineError("pipeline p2p: a fixed-shape receive needs the expected shape (or variable_seq_lengths)");
  }
  Inbound(Inbound&&) noexcept = default;
  Inbound& operator=(Inbound&&) noexcept = default;

  [[nodiscard]] int peer() const { return peer_; }
  [[nodiscard]] bool posted() const { return posted_; }
  [[nodiscard]] bool block_posted() const { return block_posted_; }
  /// The block's bytes once its buffer exists (0 before).
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(buf_.size()) * sizeof(T); }

  /// Post the first receive: the shape's (variable lengths) or the block's. Never blocks.
  void post() {
    if (posted_) return;
    posted_ = true;
    if (variable_) {
      auto s = scope(pp_, "shape");
      shape_req_ = pp_.irecv(wire_.data(), 3, DType::i64, peer_);
    } else {
      post_block();
    }
  }
  /// Post the block's receive (waits for the shape first when it is still on its way).
  void post_block() {
    post();
    if (block_posted_) return;
    if (variable_) {
      shape_req_.wait();
      shape_arrived();
    }
    const auto [r, c] = detail::block_shape<L>(*shape_, tp_.size(), tp_.rank());
    buf_ = B::template empty<T>(r, c);
    block_posted_ = true;
    block_req_ = pp_.irecv(buf_.data(), static_cast<std::size_t>(buf_.size()), dtype_of<T>, peer_,
                           detail::block_info(L::notation, *shape_));
  }
  /// Drives progress without blocking (the shape, then the block); true once the block is here.
  bool test() {
    if (!posted_) return false;
    if (!block_posted_) {
      if (!shape_req_.test()) return false;
      post_block();
    }
    return block_req_.test();
  }
  /// Finish the receive (posting what is not posted yet) and return X[L].
  X wait() {
    post_block();
    block_req_.wait();
    return X(std::move(buf_), shape_->rows(), shape_->cols(), tp_);
  }
  /// The blocking form: recv of the shape (variable lengths), then recv of the block.
  X recv_now() {
    if (posted_) return wait();
    posted_ = block_posted_ = true;
    if (variable_) {
      auto s = scope(pp_, "shape");
      pp_.recv(wire_.data(), 3, DType::i64, peer_);
      shape_arrived();
    }
    const auto [r, c] = detail::block_shape<L>(*shape_, tp_.size(), tp_.rank());
    buf_ = B::template empty<T>(r, c);
    pp_.recv(buf_.data(), static_cast<std::size_t>(buf_.size()), dtype_of<T>, peer_,
             detail::block_info(L::notation, *shape_));
    return X(std::move(buf_), shape_->rows(), shape_->cols(), tp_);
  }

 private:
  // Variable lengths: the 3 integers are here; they must be the shape the receiver expects.
  void shape_arrived() {
    shape_ = ActShape{wire_[0], wire_[1], wire_[2]};
    if (expected_ && *expected_ != *shape_)
      throw PipelineError(detail::cat("pipeline p2p: pp rank ", pp_.rank(), " expected a message of shape ",
                                      detail::shape_text(*expected_), " from pp rank ", peer_, ", which sent ",
                                      detail::shape_text(*shape_)));
  }
  Group pp_, tp_;
  int peer_;
  bool variable_;
  std::optional<ActShape> expected_, shape_;
  std::array<std::int64_t, 3> wire_{};
  typename B::template matrix<T> buf_;
  Request shape_req_, block_req_;
  bool posted_ = false, block_posted_ = false;
};

/// Blocking send of x (its shape first with variable lengths); returns when the send completes.
template <class T, class L, class B>
void send(Group pp, const Sharded<T, L, B>& x, int peer, const ActShape& shape, const P2POptions& o = {}) {
  send_async(pp, x, peer, shape, o).wait();
}
/// Blocking receive of X[L] from `peer`, rebuilt on `tp` (`expected` is required without
/// variable lengths; with them, compared with the shape that arrives when given).
template <class T, class L, class B = CpuBackend>
Sharded<T, L, B> recv(Group pp, Group tp, int peer, std::optional<ActShape> expected, const P2POptions& o = {}) {
  return Inbound<T, L, B>(std::move(pp), std::move(tp), peer, expected, o).recv_now();
}

/// What communicate() received.
template <class X>
struct Exchanged {
  std::optional<X> from_prev, from_next;
};

/// Megatron-LM's _communicate on the pp group: send `to_prev` / `to_next` (null: nothing) and
/// receive from prev / next (`recv_prev`, `recv_next`), prev = pp rank − 1 and next = pp rank + 1
/// (`wrap`: round the ring, as the interleaved schedule's stages go). `expected` is the shape of
/// what is received without variable lengths (with them, it only gives the seq of the shapes sent:
/// what arrives is not compared). Batched or ring exchange: see the top of the file.
/// Every rank must make the matching call (what one sends next, the next receives from prev).
template <class T, class L, class B>
Exchanged<Sharded<T, L, B>> communicate(Group pp, const Group& tp, const Sharded<T, L, B>* to_prev,
                                         const Sharded<T, L, B>* to_next, bool recv_prev, bool recv_next,
                                         const ActShape& expected, const P2POptions& o, bool wrap = false) {
  using X = Sharded<T, L, B>;
  const int p = pp.size(), r = pp.rank();
  const int prev = r > 0 ? r - 1 : (wrap ? p - 1 : -1), next = r + 1 < p ? r + 1 : (wrap ? 0 : -1);
  const auto need = [&](bool want, int peer, const char* side) {
    if (want && peer < 0)
      throw PipelineError(detail::cat("pipeline p2p: pp rank ", r, " of ", p, " has no ", side, " stage"));
  };
  need(to_prev || recv_prev, prev, "previous");
  need(to_next || recv_next, next, "next");
  const auto shape_of = [](const X& x, const ActShape& like) {
    // The sender knows its tensor's rows; seq and batch follow `like` when they multiply to them.
    if (like.seq > 0 && x.rows() % like.seq == 0) return ActShape{like.seq, x.rows() / like.seq, x.cols()};
    return ActShape{x.rows(), 1, x.cols()};
  };
  Exchanged<X> out;
  if (!o.ring_exchange) {  // batched: receives first, then sends, then wait for all
    std::optional<Inbound<T, L, B>> in_prev, in_next;
    const std::optional<ActShape> want = o.variable_seq_lengths ? std::nullopt : std::optional(expected);
    if (recv_prev) in_prev.emplace(pp, tp, prev, want, o), in_prev->post();
    if (recv_next) in_next.emplace(pp, tp, next, want, o), in_next->post();
    std::optional<Outbound<T, B>> s_prev, s_next;
    if (to_prev) s_prev.emplace(send_async(pp, *to_prev, prev, shape_of(*to_prev, expected), o));
    if (to_next) s_next.emplace(send_async(pp, *to_next, next, shape_of(*to_next, expected), o));
    if (in_prev) out.from_prev.emplace(in_prev->wait());
    if (in_next) out.from_next.emplace(in_next->wait());
    if (s_prev) s_prev->wait();
    if (s_next) s_next->wait();
    return out;
  }
  // Ring exchange: shift forward (to next, from prev), then backward (to prev, from next); each
  // shift's send is started before its receive and completed before the next shift.
  const auto shift = [&](const X* send_to, int to, bool want, int from, std::optional<X>& got) {
    std::optional<Outbound<T, B>> s;
    if (send_to) s.emplace(send_async(pp, *send_to, to, shape_of(*send_to, expected), o));
    if (want) got.emplace(recv<T, L, B>(pp, tp, from, o.variable_seq_lengths ? std::nullopt : std::optional(expected), o));
    if (s) s->wait();
  };
  shift(to_next, next, recv_prev, prev, out.from_prev);
  shift(to_prev, prev, recv_next, next, out.from_next);
  return out;
}

}  // namespace shardalg::pipeline
