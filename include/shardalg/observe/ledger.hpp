// shardalg/observe/ledger.hpp — every collective, recorded: kind, elements, bytes, dtype, the
// layouts it moved between and the scope it ran in. Tests assert exact counts against the
// analytic ones (two all-reduces of T·h per block forward, …).
//
//   Ledger ledger;
//   Group g = ledgered(comm, ledger);             // decorate any Communicator
//   { auto s = ledger.scope("mlp.fwd"); ... }     // label what runs inside
//   ledger.count(CollectiveKind::all_reduce, "mlp.fwd") == 1
//
// A ledger belongs to one rank (each rank decorates its own handle). Scopes nest with '/'.
// `elements` is the size V of the dense matrix the collective is about: n for all_reduce and
// broadcast, P·n for all_gather and reduce_scatter (the gathered or reduced whole), P²·n for
// all_to_all (P ranks exchange P tiles of n each); all_to_allv is recorded as all_to_all with the
// elements this rank sends (Σ send_counts); send/recv (and isend/irecv, recorded as send/recv when
// they start) carry the peer rank. The cost model's ring factors apply to V. Verification traffic
// (to_dense, replica checks) is not recorded.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardalg/base/linkage.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/observe/explain_log.hpp"
#if defined(SHARDALG_EXTERN_TEMPLATES)
#include "shardalg/comm/thread.hpp"  // ThreadComm, for its ledgered instantiation below
#endif

namespace shardalg {

struct LedgerEntry {
  CollectiveKind kind;
  std::size_t elements;
  std::size_t bytes;
  DType dtype;
  std::string layout_in;
  std::string layout_out;
  std::string scope;
  int group_size;
  // When it ran, in seconds since the ledger was made (start = end for an asynchronous start).
  double start_seconds = 0;
  double end_seconds = 0;
  std::string axis = {};  // the mesh axis of the group ("dp", "tp", …), "" for a whole world
  int peer = -1;          // point to point (send, recv, isend, irecv): the other rank; −1 for collectives
};

class Ledger final : public Recorder {
 public:
  /// RAII label for the collectives that run while it lives.
  class Scope {
   public:
    Scope(Ledger& l, std::string label) : ledger_(&l) { ledger_->push_scope(std::move(label)); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope(Scope&& o) noexcept : ledger_(std::exchange(o.ledger_, nullptr)) {}
    ~Scope() {
      if (ledger_) ledger_->pop_scope();
    }

   private:
    Ledger* ledger_;
  };

  [[nodiscard]] Scope scope(std::string label) { return Scope(*this, std::move(label)); }
  [[nodiscard]] const std::string& current_scope() const { return path_; }

  /// Records a collective as it starts; returns its index (npos for verification traffic).
  std::size_t record(CollectiveKind kind, std::size_t elements, DType dtype, const CallInfo& info,
                     int group_size, std::string_view axis = {}, int peer = -1);
  /// Entry `k` (from record) has finished: the decorator calls this after forwarding the call.
  void finish(std::size_t k) {
    if (k < entries_.size()) entries_[k].end_seconds = now();
  }
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  /// Seconds since this ledger was made.
  [[nodiscard]] double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

  /// The entries as a Chrome trace (Trace Event Format, JSON; open it in https://ui.perfetto.dev):
  /// one complete event per collective on thread `rank`, named by the collective, its scope as the
  /// category, its layouts, elements, bytes and dtype as arguments. Timestamps are microseconds of
  /// the system clock (since 1970), so the traces of ranks whose ledgers were made at different
  /// times — threads, or processes on one host — line up: merge them by concatenating their
  /// "traceEvents".
  [[nodiscard]] std::string chrome_trace(int rank = 0) const;

  [[nodiscard]] const std::vector<LedgerEntry>& entries() const { return entries_; }
  /// Forgets the entries and the explain log (ops still open stay open).
  void clear() {
    entries_.clear();
    ops_.clear();
    open_.clear();
  }

  // ---- the explain log (observe/explain_log.hpp) ----------------------------------------------
  /// Turns the explain log on or off; off by default (then ops do not even format their text).
  void explain(bool on) { explaining_ = on; }
  [[nodiscard]] bool explaining() const override { return explaining_; }
  /// An op starts: the collectives recorded until close_op() are its own. Ops nest.
  void open_op(std::string op, std::string dtype, std::string layouts) override;
  void close_op() override {
    if (!open_.empty()) open_.pop_back();
  }
  [[nodiscard]] const std::vector<ExplainRecord>& explained() const { return ops_; }
  /// The explain log as a table: one line per op (children indented), its collectives beside it.
  [[nodiscard]] std::string explain_log() const;

  /// True when `entry_scope` is `scope` or nested inside it ("" matches everything).
  static bool in_scope(std::string_view entry_scope, std::string_view scope) {
    if (scope.empty()) return true;
    if (entry_scope.size() < scope.size() || entry_scope.substr(0, scope.size()) != scope) return false;
    return entry_scope.size() == scope.size() || entry_scope[scope.size()] == '/';
  }

  [[nodiscard]] std::vector<LedgerEntry> select(std::string_view scope = "") const;
  [[nodiscard]] std::size_t count(std::string_view scope = "") const { return select(scope).size(); }
  [[nodiscard]] std::size_t count(CollectiveKind k, std::string_view scope = "") const {
    std::size_t n = 0;
    for (const auto& e : entries_) n += (e.kind == k && in_scope(e.scope, scope));
    return n;
  }
  [[nodiscard]] std::size_t bytes(CollectiveKind k, std::string_view scope = "") const {
    std::size_t n = 0;
    for (const auto& e : entries_)
      if (e.kind == k && in_scope(e.scope, scope)) n += e.bytes;
    return n;
  }
  [[nodiscard]] std::size_t bytes(std::string_view scope = "") const {
    std::size_t n = 0;
    for (const auto& e : entries_)
      if (in_scope(e.scope, scope)) n += e.bytes;
    return n;
  }

  /// One line per entry: scope, mesh axis ("-" for a whole world), kind, layouts, elements,
  /// bytes, dtype. The text columns widen to their longest entry.
  [[nodiscard]] std::string table() const;

  /// Recorder: the scope labels (Scope above, or scope(group, label) through a Group).
  void push_scope(std::string label) override;
  void pop_scope() override;

 private:

  // Microseconds since 1970 of a time `seconds` after this ledger was made, with three decimals
  // (the whole part in integers: a double holds the sum to a quarter of a microsecond only).
  void write_wall_us(std::ostream& os, double seconds) const;

  static std::string json_escape(std::string_view in) {
    std::string out;
    for (char c : in) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) < 0x20) continue;  // no control characters in labels
      out += c;
    }
    return out;
  }

  static std::size_t utf8_length(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  std::vector<LedgerEntry> entries_;
  bool explaining_ = false;
  std::vector<ExplainRecord> ops_;
  std::vector<std::size_t> open_;  // indices into ops_ of the ops still running, innermost last
  std::vector<std::size_t> stack_;
  std::string path_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  long long wall0_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
};

/// The ledger decorator: a Communicator that records each call, then forwards it to `C`.
template <Communicator C>
class Ledgered {
 public:
  Ledgered(C inner, Ledger& ledger, std::string axis = {})
      : inner_(std::move(inner)), ledger_(&ledger), axis_(std::move(axis)) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::uintptr_t key() const { return inner_.key(); }
  Ledger* ledger() const { return ledger_; }
  Recorder* recorder() const { return ledger_; }
  C& inner() { return inner_; }
  /// The mesh axis this group is ("" for a whole world); each entry records it.
  [[nodiscard]] const std::string& axis() const { return axis_; }
  /// Split the decorated communicator; the sub-group records into the same ledger under `axis`.
  template <class Self = C>
    requires requires(Self& s) { s.split(0, 0); }
  [[nodiscard]] auto split(int color, int key, std::string_view axis) {
    using Sub = std::remove_cvref_t<decltype(inner_.split(color, key))>;
    return Ledgered<Sub>(inner_.split(color, key), *ledger_, std::string(axis));
  }
  /// Named by what it decorates: the ledger does not change the group.
  std::string name() const {
    if constexpr (requires { inner_.name(); }) return std::string(inner_.name());
    else return "a communicator";
  }

  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::all_reduce, n, t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.all_reduce(b, n, t, op, info...); }, i);
    ledger_->finish(k);
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::all_gather, n * size(), t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.all_gather(s, r, n, t, info...); }, i);
    ledger_->finish(k);
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op,
                      const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::reduce_scatter, n * size(), t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.reduce_scatter(s, r, n, t, op, info...); }, i);
    ledger_->finish(k);
  }
  void all_to_all(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::all_to_all, n * size() * size(), t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.all_to_all(s, r, n, t, info...); }, i);
    ledger_->finish(k);
  }
  void broadcast(void* b, std::size_t n, DType t, int root, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::broadcast, n, t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.broadcast(b, n, t, root, info...); }, i);
    ledger_->finish(k);
  }
  void send(const void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(i.halo ? CollectiveKind::halo : CollectiveKind::send, n, t, i, size(), axis_, peer);
    forward([&](auto& c, const auto&... info) { c.send(b, n, t, peer, info...); }, i);
    ledger_->finish(k);
  }
  void recv(void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    const std::size_t k = ledger_->record(CollectiveKind::recv, n, t, i, size(), axis_, peer);
    forward([&](auto& c, const auto&... info) { c.recv(b, n, t, peer, info...); }, i);
    ledger_->finish(k);
  }
  /// Recorded as all_to_all with the elements this rank sends (Σ send_counts); one that carries an
  /// uneven all_gather, reduce_scatter or all_to_all (CallInfo::uneven_as) as that collective,
  /// with the whole matrix's elements.
  template <class Self = C>
    requires VariableAllToAll<Self>
  void all_to_allv(const void* s, const std::size_t* sc, void* r, const std::size_t* rc, DType t, const CallInfo& i = {}) {
    std::size_t total = 0;
    for (int p = 0; p < size(); ++p) total += sc[p];
    const std::size_t k = i.uneven_as ? ledger_->record(*i.uneven_as, i.uneven_elements, t, i, size(), axis_)
                                      : ledger_->record(CollectiveKind::all_to_all, total, t, i, size(), axis_);
    forward([&](auto& c, const auto&... info) { c.all_to_allv(s, sc, r, rc, t, info...); }, i);
    ledger_->finish(k);
  }
  /// Recorded as the send / recv they are, with the peer, when they start (start = end).
  template <class Self = C>
    requires AsyncPointToPoint<Self>
  [[nodiscard]] Request isend(const void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    ledger_->record(i.halo ? CollectiveKind::halo : CollectiveKind::send, n, t, i, size(), axis_, peer);
    if constexpr (requires { inner_.isend(b, n, t, peer, i); }) return inner_.isend(b, n, t, peer, with_scope(i));
    else return inner_.isend(b, n, t, peer);
  }
  template <class Self = C>
    requires AsyncPointToPoint<Self>
  [[nodiscard]] Request irecv(void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    ledger_->record(CollectiveKind::recv, n, t, i, size(), axis_, peer);
    if constexpr (requires { inner_.irecv(b, n, t, peer, i); }) return inner_.irecv(b, n, t, peer, with_scope(i));
    else return inner_.irecv(b, n, t, peer);
  }
  [[nodiscard]] bool async_p2p() const {
    if constexpr (requires { inner_.async_p2p(); }) return inner_.async_p2p();
    else return AsyncPointToPoint<C>;
  }
  void barrier() { inner_.barrier(); }

  /// Recorded as the all_reduce it is, when it starts.
  [[nodiscard]] Request iall_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    ledger_->record(CollectiveKind::all_reduce, n, t, i, size(), axis_);
    if constexpr (requires { inner_.iall_reduce(b, n, t, op, i); }) {
      CallInfo j = i;
      if (j.scope.empty()) j.scope = ledger_->current_scope();
      return inner_.iall_reduce(b, n, t, op, j);
    } else if constexpr (AsyncAllReduce<C>) {
      return inner_.iall_reduce(b, n, t, op);
    } else {
      forward([&](auto& c, const auto&... info) { c.all_reduce(b, n, t, op, info...); }, i);
      return {};
    }
  }
  [[nodiscard]] bool async_all_reduce() const { return shardalg::async_all_reduce(inner_); }

 private:
  CallInfo with_scope(const CallInfo& i) const {
    CallInfo j = i;
    if (j.scope.empty()) j.scope = ledger_->current_scope();
    return j;
  }
  // Pass the CallInfo on when the inner communicator understands it (a decorator, or a backend
  // with checked collectives), with this ledger's scope label for the fingerprint's text.
  template <class F>
  void forward(F&& f, const CallInfo& i) {
    if constexpr (InfoAwareCommunicator<C>) {
      CallInfo j = i;
      if (j.scope.empty()) j.scope = ledger_->current_scope();
      f(inner_, j);
    } else {
      f(inner_);
    }
  }

  C inner_;
  Ledger* ledger_;
  std::string axis_;
};

/// Decorate a communicator (or a Group) with a ledger; the result is a Group.
template <Communicator C>
Group ledgered(C comm, Ledger& ledger) {
  return Group(Ledgered<C>(std::move(comm), ledger));
}

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/runtime.cpp (base/linkage.hpp)
extern template class Ledgered<ThreadComm>;
extern template struct Group::Model<Ledgered<ThreadComm>>;
#endif


#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp

SHARDALG_FUNC std::size_t Ledger::record(CollectiveKind kind, std::size_t elements, DType dtype, const CallInfo& info,
                                        int group_size, std::string_view axis, int peer) {
  if (info.verification) return npos;
  const double t = now();
  entries_.push_back({kind, elements, elements * size_of(dtype), dtype, std::string(info.layout_in),
                      std::string(info.layout_out), path_, group_size, t, t, std::string(axis), peer});
  const std::size_t k = entries_.size() - 1;
  if (explaining_) {
    if (open_.empty())  // a raw Group call: a line of its own
      ops_.push_back({path_, 0, "-", std::string(to_string(dtype)),
                      std::string(info.layout_in) + " → " + std::string(info.layout_out), {k}});
    else ops_[open_.back()].collectives.push_back(k);
  }
  return k;
}

SHARDALG_FUNC std::string Ledger::chrome_trace(int rank) const {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << "{\"traceEvents\": [";
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    os << (i ? ",\n" : "\n") << "{\"name\": \"" << to_string(e.kind) << "\", \"cat\": \""
       << json_escape(e.scope.empty() ? "-" : e.scope) << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << rank
       << ", \"ts\": ";
    write_wall_us(os, e.start_seconds);
    os << ", \"dur\": " << (e.end_seconds - e.start_seconds) * 1e6 << ", \"args\": {\"layouts\": \"" << json_escape(e.layout_in + " -> " + e.layout_out)
       << "\", \"elements\": " << e.elements << ", \"bytes\": " << e.bytes << ", \"dtype\": \""
       << to_string(e.dtype) << "\", \"group_size\": " << e.group_size;
    if (e.peer >= 0) os << ", \"peer\": " << e.peer;
    os << "}}";
  }
  os << "\n], \"displayTimeUnit\": \"ms\"}\n";
  return os.str();
}

SHARDALG_FUNC void Ledger::open_op(std::string op, std::string dtype, std::string layouts) {
  ops_.push_back({path_, static_cast<int>(open_.size()), std::move(op), std::move(dtype), std::move(layouts), {}});
  open_.push_back(ops_.size() - 1);
}

SHARDALG_FUNC std::string Ledger::explain_log() const {
  std::size_t ws = 5, wo = 2, wl = 7;
  for (const auto& r : ops_) {
    ws = std::max(ws, r.scope.empty() ? 1 : r.scope.size());
    wo = std::max(wo, 2 * static_cast<std::size_t>(r.depth) + r.op.size());
    wl = std::max(wl, utf8_length(r.layouts));
  }
  std::ostringstream os;
  auto line = [&](const std::string& sc, const std::string& op, const std::string& dt, const std::string& lay,
                  const std::string& coll) {
    os << detail::pad_utf8(sc, ws) << detail::pad_utf8(op, wo) << detail::pad_utf8(dt, 5)
       << detail::pad_utf8(lay, wl) << coll << '\n';
  };
  line("scope", "op", "dtype", "layouts", "collectives");
  for (const auto& r : ops_) {
    std::vector<std::string> coll;
    for (std::size_t k : r.collectives) {
      if (k >= entries_.size()) continue;
      const auto& e = entries_[k];
      std::ostringstream c;
      c << to_string(e.kind) << ' ' << e.elements << " x " << to_string(e.dtype) << " = "
        << detail::human_bytes(e.bytes) << " on " << e.group_size << (e.group_size == 1 ? " rank" : " ranks");
      coll.push_back(c.str());
    }
    if (coll.empty()) coll.push_back("-");
    const std::string indent(2 * static_cast<std::size_t>(r.depth), ' ');
    line(r.scope.empty() ? "-" : r.scope, indent + r.op, r.dtype, r.layouts, coll[0]);
    for (std::size_t i = 1; i < coll.size(); ++i) line("", "", "", "", coll[i]);
  }
  return os.str();
}

SHARDALG_FUNC std::vector<LedgerEntry> Ledger::select(std::string_view scope) const {
  std::vector<LedgerEntry> out;
  for (const auto& e : entries_)
    if (in_scope(e.scope, scope)) out.push_back(e);
  return out;
}

SHARDALG_FUNC std::string Ledger::table() const {
  std::size_t ws = 22, wa = 6, wk = 16, wl = 20;
  for (const auto& e : entries_) {
    ws = std::max(ws, (e.scope.empty() ? 1 : utf8_length(e.scope)) + 2);
    wa = std::max(wa, (e.axis.empty() ? 1 : e.axis.size()) + 2);
    wk = std::max(wk, to_string(e.kind).size() + 2);
    wl = std::max(wl, utf8_length(e.layout_in + " -> " + e.layout_out) + 2);
  }
  std::ostringstream os;
  const auto cell = [&](const std::string& text, std::size_t w) {
    const std::size_t n = utf8_length(text);
    os << text << std::string(w > n ? w - n : 1, ' ');
  };
  cell("scope", ws);
  cell("axis", wa);
  cell("collective", wk);
  cell("layouts", wl);
  os << std::right << std::setw(12) << "elements" << std::setw(12) << "bytes" << "  dtype\n";
  for (const auto& e : entries_) {
    cell(e.scope.empty() ? "-" : e.scope, ws);
    cell(e.axis.empty() ? "-" : e.axis, wa);
    cell(std::string(to_string(e.kind)), wk);
    cell(e.layout_in + " -> " + e.layout_out, wl);
    os << std::right << std::setw(12) << e.elements << std::setw(12) << e.bytes << "  " << to_string(e.dtype)
       << '\n';
  }
  return os.str();
}

SHARDALG_FUNC void Ledger::push_scope(std::string label) {
  stack_.push_back(path_.size());
  if (!path_.empty()) path_ += '/';
  path_ += label;
}

SHARDALG_FUNC void Ledger::pop_scope() {
  path_.resize(stack_.back());
  stack_.pop_back();
}

SHARDALG_FUNC void Ledger::write_wall_us(std::ostream& os, double seconds) const {
  const double us = seconds * 1e6;
  auto whole = static_cast<long long>(us);
  auto milli = std::llround((us - static_cast<double>(whole)) * 1000.0);
  if (milli >= 1000) {
    ++whole;
    milli -= 1000;
  }
  os << wall0_us_ + whole << '.' << std::setw(3) << std::setfill('0') << milli << std::setfill(' ');
}

#endif  // SHARDALG_RUNTIME_BODIES

}  // namespace shardalg
