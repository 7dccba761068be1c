// shardalg/pipeline/executor.hpp — run one rank's op list of a Schedule on real stages: the
// forward and backward passes of its model chunks, the activations and gradients sent to the
// neighbouring stages (p2p.hpp), the bytes it holds between ops, and a timeline.
//
//   pipeline::Executor<Model> ex(pp_group, schedule, options);
//   RunStats st = ex.run(model);      // every pp rank of the group calls it with its own model
//
// The model (a StageModel, e.g. nn::PipelineGpt) computes; the executor moves data. For op
// (kind, micro-batch j, chunk c) on stage s = c·p + r (schedule.hpp):
//
//   F    input: X_j from stage s − 1 (none on stage 0)      output: X_j to stage s + 1 (none on S − 1)
//   B    input: dX_j from stage s + 1 (the loss on S − 1)   output: dX_j to stage s − 1 (none on 0)
//   BW   as B, weight gradients included
//   W    the weight gradients of (j, c), from what B kept; no message
//
// Messages and their order (deadlock-free). A rank sends each message when the op producing it
// ends, with isend: a send never blocks. A rank receives from a peer in the order the peer sends
// — both sides compute that order from the schedule (every rank has the whole schedule) — and
// keeps a message that arrives before the op that needs it (interleaved stages and p = 2 put
// activations and gradients on one pair of ranks). So a rank waits only for a message its peer
// will send without waiting for anything of this rank's: a schedule that the simulator runs
// without deadlock runs here without deadlock (its dependencies are the messages' sources). On
// one rank (p = 1) the stages hand their tensors over locally.
//
// Overlap (ExecOptions::overlap_p2p, Megatron-LM's overlap_p2p_comm_warmup_flush): before an op
// computes, the receive of the next op that needs a message is posted (irecv), so it arrives
// while this op computes; off, each receive is a blocking recv at the op that needs it.
//
// Output deallocation (ExecOptions::deallocate_outputs, Megatron-LM's deallocate_pipeline_outputs):
// on, a stage's output is released once its send completes; off, it is kept until the backward
// of its micro-batch (as Megatron keeps output_tensors for autograd). The explicit backward never
// reads the stage's output — each layer's cache holds what its backward needs (the norms' x̂, the
// GEMMs' inputs), the residual's gradient passes through — so nothing else has to change: there
// is no autograd root to keep and no custom_backward. The input is never kept either.
//
// Bytes held (RunStats::held): after every op, the sum of the local blocks the rank holds for its
// micro-batches — the model's state (StageModel::bytes: caches, gradients kept for W), outputs
// kept for the backward, messages received and not yet used (receive buffers included) and
// sends not yet completed — measured from the matrices, not estimated.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/pipeline/p2p.hpp"
#include "shardalg/pipeline/schedule.hpp"

namespace shardalg::pipeline {

struct ExecOptions {
  P2POptions p2p;                   // variable sequence lengths (shape messages)
  bool deallocate_outputs = false;  // release a stage's output once sent
  bool overlap_p2p = false;         // post the next op's receive before computing this one
};

/// One op as it ran: seconds since the run's start (the same origin on every rank of the pp
/// group: the earliest rank's clock after a barrier).
struct OpRecord {
  Op op;
  int stage = 0;
  double begin = 0;  // the op was reached (before waiting for its input)
  double ready = 0;  // its input had arrived
  double end = 0;    // it finished (its output's send posted)
  [[nodiscard]] double wait() const { return ready - begin; }
  [[nodiscard]] double compute() const { return end - ready; }
};

struct RunStats {
  std::vector<OpRecord> ops;         // this rank's ops, in order
  std::vector<std::size_t> held;     // bytes held after each op
  std::size_t peak_bytes = 0;        // max of held
  double wait_seconds = 0;           // Σ waiting for inputs
  double compute_seconds = 0;        // Σ computing
  double end_seconds = 0;            // when the last op ended (all sends completed)
  std::size_t sent = 0, received = 0;  // messages (a shape and its block count once)
};

/// What the executor needs from a model (nn::PipelineGpt is one):
///   Act                              Sharded<T, L, B>: the activation between stages
///   State                            what one (micro-batch, chunk) keeps from F to its B/W
///   tp()                             the group Act lives on
///   shape(mb)                        the global shape of micro-batch mb's activations
///   forward(c, mb, in, st)           F; in is nullopt on stage 0; returns nullopt on stage S − 1
///   backward(c, mb, st, dy, w)       B (w = false) or BW (w = true); dy nullopt on stage S − 1;
///                                    returns dX, nullopt on stage 0
///   weights(c, mb, st)               W
///   bytes(st)                        the bytes st holds
template <class M>
concept StageModel = requires(M& m, const M& cm, int c, int mb, typename M::State& st, std::optional<typename M::Act> a) {
  { cm.tp() } -> std::convertible_to<Group>;
  { cm.shape(mb) } -> std::same_as<ActShape>;
  { m.forward(c, mb, std::move(a), st) } -> std::same_as<std::optional<typename M::Act>>;
  { m.backward(c, mb, st, std::move(a), true) } -> std::same_as<std::optional<typename M::Act>>;
  m.weights(c, mb, st);
  { cm.bytes(st) } -> std::convertible_to<std::size_t>;
};

template <StageModel M>
class Executor {
 public:
  using Act = typename M::Act;
  using T = typename Act::value_type;
  using L = typename Act::layout;
  using B = typename Act::backend;

  /// `pp`: this rank's pipeline group (rank r = its pp coordinate, size = s.p).
  Executor(Group pp, Schedule s, ExecOptions o) : pp_(std::move(pp)), s_(std::move(s)), o_(o) {
    check_valid(s_);
    if (pp_.size() != s_.p)
      throw PipelineError(detail::cat("pipeline::Executor: schedule '", s_.name, "' is for p = ", s_.p,
                                      " pipeline ranks, the pp group has ", pp_.size()));
  }

  [[nodiscard]] const Schedule& schedule() const { return s_; }
  [[nodiscard]] int stage(int chunk) const { return s_.stage(pp_.rank(), chunk); }

  /// Runs this rank's list. Collective over the pp group (a barrier and one verification
  /// all-reduce for the common clock; every message of the schedule).
  RunStats run(M& model) {
    const int r = pp_.rank(), S = s_.stages();
    if constexpr (requires { model.chunk_count(); })
      if (model.chunk_count() != s_.v)
        throw PipelineError(detail::cat("pipeline::Executor: schedule '", s_.name, "' runs v = ", s_.v,
                                        " model chunks per rank, the model has ", model.chunk_count()));
    if constexpr (requires { model.microbatch_count(); })
      if (model.microbatch_count() != s_.m)
        throw PipelineError(detail::cat("pipeline::Executor: schedule '", s_.name, "' runs m = ", s_.m,
                                        " micro-batches, the model was given ", model.microbatch_count()));
    tp_ = model.tp();
    shape_of_ = [&model](int mb) { return model.shape(mb); };
    sent_ = received_ = 0;
    channels_.clear();
    local_.clear();
    sends_.clear();
    kept_.clear();
    states_.clear();
    plan_channels();
    // An error in an op (this rank's model, or a message that does not match) leaves receives
    // posted and sends in flight: they are cancelled while the error unwinds (Request), never
    // waited for — the peer may be waiting for this rank, and the error must reach the caller.
    struct Abandon {
      Executor& e;
      int uncaught = std::uncaught_exceptions();
      ~Abandon() {
        if (std::uncaught_exceptions() > uncaught) {
          e.channels_.clear();
          e.sends_.clear();
          e.kept_.clear();
        }
      }
    } abandon{*this};
    RunStats st;
    pp_.barrier();
    double t0 = seconds_now();
    pp_.all_reduce(&t0, 1, DType::f64, ReduceOp::min, CallInfo{"-", "-", true});
    const auto& ops = s_.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const int s = stage(op.chunk);
      OpRecord rec{op, s, seconds_now() - t0, 0, 0};
      auto label = scope(pp_, std::string(kind_name(op.kind)) + std::to_string(op.microbatch));
      if (o_.overlap_p2p) prefetch_after(i);
      std::optional<Act> in = take_input(op, s);
      rec.ready = seconds_now() - t0;
      const auto key = std::pair{op.microbatch, op.chunk};
      switch (op.kind) {
        case OpKind::F: {
          typename M::State state;
          std::optional<Act> out = model.forward(op.chunk, op.microbatch, std::move(in), state);
          states_.emplace(key, std::move(state));
          if (s < S - 1) emit(Key{false, op.microbatch, s + 1}, std::move(*out), /*keep=*/!o_.deallocate_outputs);
          break;
        }
        case OpKind::B:
        case OpKind::BW: {
          auto it = states_.find(key);
          if (it == states_.end()) throw missing(op, "its forward");
          std::optional<Act> dx = model.backward(op.chunk, op.microbatch, it->second, std::move(in), op.kind == OpKind::BW);
          kept_.erase(key);  // the output kept for the backward (no deallocation)
          if (op.kind == OpKind::BW) states_.erase(it);
          if (s > 0) emit(Key{true, op.microbatch, s - 1}, std::move(*dx), false);
          break;
        }
        case OpKind::W: {
          auto it = states_.find(key);
          if (it == states_.end()) throw missing(op, "its B");
          model.weights(op.chunk, op.microbatch, it->second);
          states_.erase(it);
          break;
        }
      }
      rec.end = seconds_now() - t0;
      progress_sends();
      st.ops.push_back(rec);
      st.held.push_back(held(model));
      st.peak_bytes = std::max(st.peak_bytes, st.held.back());
      st.wait_seconds += rec.wait();
      st.compute_seconds += rec.compute();
    }
    for (auto& snd : sends_) snd.out.wait();
    st.sent = sent_;
    st.received = received_;
    sends_.clear();
    st.end_seconds = seconds_now() - t0;
    return st;
  }

 private:
  /// A message: an activation (grad = false) for stage `stage`'s F, or a gradient for its B.
  struct Key {
    bool grad = false;
    int mb = 0;
    int stage = 0;
    friend bool operator==(const Key&, const Key&) = default;
    friend bool operator<(const Key& a, const Key& b) {
      return std::tie(a.grad, a.mb, a.stage) < std::tie(b.grad, b.mb, b.stage);
    }
  };
  /// Messages from one peer, in the order the peer sends them.
  struct Channel {
    int peer = -1;
    std::vector<Key> order;
    std::map<Key, std::size_t> index;
    std::vector<std::optional<Inbound<T, L, B>>> slots;  // posted receives
    std::map<std::size_t, Act> ready;                    // arrived, not taken yet
    std::size_t posted = 0, blocking_next = 0;
  };
  struct Send {
    Outbound<T, B> out;
  };

  static double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  [[nodiscard]] int rank_of(int stage) const { return stage % s_.p; }
  PipelineError missing(const Op& op, const char* what) const {
    return PipelineError(detail::cat("pipeline::Executor: rank ", pp_.rank(), " runs ", describe(op), " before ", what,
                                     " (schedule '", s_.name, "')"));
  }

  // Which messages each peer sends this rank, in the peer's order.
  void plan_channels() {
    const int r = pp_.rank(), S = s_.stages();
    for (int q = 0; q < s_.p; ++q) {
      if (q == r) continue;
      for (const Op& op : s_.ranks[static_cast<std::size_t>(q)]) {
        const int s = s_.stage(q, op.chunk);
        std::optional<Key> k;
        if (op.kind == OpKind::F && s < S - 1 && rank_of(s + 1) == r) k = Key{false, op.microbatch, s + 1};
        if ((op.kind == OpKind::B || op.kind == OpKind::BW) && s > 0 && rank_of(s - 1) == r)
          k = Key{true, op.microbatch, s - 1};
        if (!k) continue;
        auto& ch = channels_[q];
        ch.peer = q;
        ch.index[*k] = ch.order.size();
        ch.order.push_back(*k);
      }
    }
    for (auto& [q, ch] : channels_) ch.slots.resize(ch.order.size());
  }

  /// The input of `op` on stage s, or nullopt (first stage's F, last stage's B).
  std::optional<Act> take_input(const Op& op, int s) {
    const int S = s_.stages();
    std::optional<Key> k;
    if (op.kind == OpKind::F && s > 0) k = Key{false, op.microbatch, s};
    if ((op.kind == OpKind::B || op.kind == OpKind::BW) && s < S - 1) k = Key{true, op.microbatch, s};
    if (!k) return std::nullopt;
    const int from = rank_of(k->grad ? s + 1 : s - 1);
    if (from == pp_.rank()) {  // p = 1: handed over locally
      auto it = local_.find(*k);
      if (it == local_.end()) throw missing(op, k->grad ? "the gradient from the next stage" : "the previous stage's F");
      Act x = std::move(it->second);
      local_.erase(it);
      return x;
    }
    auto& ch = channels_.at(from);
    const std::size_t i = ch.index.at(*k);
    ++received_;
    if (auto it = ch.ready.find(i); it != ch.ready.end()) {
      Act x = std::move(it->second);
      ch.ready.erase(it);
      return x;
    }
    if (!o_.overlap_p2p) {  // blocking: recv in the peer's order, keeping what comes first
      while (ch.blocking_next <= i) {
        const std::size_t j = ch.blocking_next++;
        Inbound<T, L, B> in(pp_, tp_, from, expected(ch.order[j]), o_.p2p);
        Act x = in.recv_now();
        if (j == i) return x;
        ch.ready.emplace(j, std::move(x));
      }
    }
    post_upto(ch, i);
    Act x = ch.slots[i]->wait();
    ch.slots[i].reset();
    // Later receives already completed stay in their slots until taken.
    return x;
  }

  /// Post the receives of `ch` up to message i, in order (each block's receive before the next
  /// message's first receive).
  void post_upto(Channel& ch, std::size_t i) {
    while (ch.posted <= i) {
      const std::size_t j = ch.posted++;
      if (j > 0 && ch.slots[j - 1]) ch.slots[j - 1]->post_block();
      ch.slots[j].emplace(pp_, tp_, ch.peer, expected(ch.order[j]), o_.p2p);
      ch.slots[j]->post();
    }
  }

  /// Post what can be posted without waiting, up to message i: stops at a message whose
  /// predecessor's shape has not arrived yet (variable lengths), since its block's receive must
  /// be posted first.
  void try_post_upto(Channel& ch, std::size_t i) {
    while (ch.posted <= i) {
      const std::size_t j = ch.posted;
      if (j > 0 && ch.slots[j - 1] && !ch.slots[j - 1]->block_posted()) {
        ch.slots[j - 1]->test();  // polls the shape; posts the block once it is here
        if (!ch.slots[j - 1]->block_posted()) return;
      }
      ch.slots[j].emplace(pp_, tp_, ch.peer, expected(ch.order[j]), o_.p2p);
      ch.slots[j]->post();
      ++ch.posted;
    }
  }

  /// Overlap: post the receives of the first op from op i on (this one included) that needs a
  /// message from a peer, and of the next such op after it — never waiting.
  void prefetch_after(std::size_t i) {
    const auto& ops = s_.ranks[static_cast<std::size_t>(pp_.rank())];
    int found = 0;
    for (std::size_t k = i; k < ops.size() && found < 2; ++k) {
      const Op& op = ops[k];
      const int s = stage(op.chunk), S = s_.stages();
      std::optional<Key> key;
      if (op.kind == OpKind::F && s > 0) key = Key{false, op.microbatch, s};
      if ((op.kind == OpKind::B || op.kind == OpKind::BW) && s < S - 1) key = Key{true, op.microbatch, s};
      if (!key) continue;
      const int from = rank_of(key->grad ? s + 1 : s - 1);
      if (from == pp_.rank()) continue;
      auto& ch = channels_.at(from);
      try_post_upto(ch, ch.index.at(*key));
      ++found;
    }
  }

  /// The shape a message must have: its micro-batch's, from the model (with variable lengths the
  /// shape that arrives is compared with it).
  std::optional<ActShape> expected(const Key& k) const { return shape_of_(k.mb); }

  void emit(const Key& k, Act x, bool keep) {
    const int to = rank_of(k.stage);
    if (to == pp_.rank()) {  // p = 1: the next stage is on this rank
      local_.emplace(k, std::move(x));
      return;
    }
    const Index rows = x.rows(), cols = x.cols();
    auto block = std::make_shared<const typename B::template matrix<T>>(std::move(x.local()));
    Outbound<T, B> out = send_async_block(block, rows, cols, to, shape_of_(k.mb));
    if (keep) kept_[std::pair{k.mb, chunk_of_sender(k)}] = block;
    sends_.push_back({std::move(out)});
    ++sent_;
  }
  // The sender's chunk: its stage is k.stage − 1 (activation) or k.stage + 1 (gradient).
  int chunk_of_sender(const Key& k) const { return (k.grad ? k.stage + 1 : k.stage - 1) / s_.p; }

  Outbound<T, B> send_async_block(std::shared_ptr<const typename B::template matrix<T>> block, Index rows, Index cols,
                                  int to, const ActShape& shape) {
    if (rows != shape.rows() || cols != shape.cols())
      throw PipelineError(detail::cat("pipeline::Executor: a ", rows, "x", cols, " message for shape (seq ", shape.seq,
                                      ", batch ", shape.batch, ", hidden ", shape.hidden, ")"));
    Outbound<T, B> out;
    out.shape = {shape.seq, shape.batch, shape.hidden};
    out.block = std::move(block);
    if (o_.p2p.variable_seq_lengths) {
      auto s = scope(pp_, "shape");
      out.shape_req = pp_.isend(out.shape.data(), 3, DType::i64, to);
    }
    out.block_req = pp_.isend(out.block->data(), static_cast<std::size_t>(out.block->size()), dtype_of<T>, to,
                              detail::block_info(L::notation, shape));
    return out;
  }

  void progress_sends() {
    std::erase_if(sends_, [](Send& s) { return s.out.test(); });
  }

  std::size_t held(const M& model) const {
    std::size_t n = 0;
    for (const auto& [k, st] : states_) n += model.bytes(st);
    for (const auto& [k, b] : kept_) n += static_cast<std::size_t>(b->size()) * sizeof(T);
    for (const auto& [k, x] : local_) n += static_cast<std::size_t>(x.local().size()) * sizeof(T);
    for (const auto& [q, ch] : channels_) {
      for (const auto& [i, x] : ch.ready) n += static_cast<std::size_t>(x.local().size()) * sizeof(T);
      for (const auto& slot : ch.slots)
        if (slot) n += slot->bytes();
    }
    for (const auto& s : sends_)  // a block also kept for the backward is counted once, there
      if (s.out.block.use_count() == 1) n += s.out.bytes();
    return n;
  }

  Group pp_, tp_;
  Schedule s_;
  ExecOptions o_;
  std::function<ActShape(int)> shape_of_;
  std::map<int, Channel> channels_;
  std::map<Key, Act> local_;
  std::vector<Send> sends_;
  std::map<std::pair<int, int>, std::shared_ptr<const typename B::template matrix<T>>> kept_;
  std::map<std::pair<int, int>, typename M::State> states_;
  std::size_t sent_ = 0, received_ = 0;
};

}  // namespace shardalg::pipeline
