// shardalg/observe/timing.hpp — one rank's timeline: named phases (RAII timers) and every
// collective, timed by a Communicator decorator, ready to be written as a Chrome trace.
//
//   verify::EventLog log;                               // t0: now (take it after a barrier)
//   Group g = ledgered(verify::Timed<Group>(raw, log), ledger);
//   { verify::EventLog::Phase ph(log, "forward block 0", "forward", "fwd/block0"); … }
//
// Timed<C> forwards each call to C and records one event: the collective's name, category
// "collective" (or "verification" for CallInfo::verification traffic, which no ledger sees), its
// start (µs since t0) and duration, and its arguments — elements V, bytes, layouts ("R -> C"),
// dtype and, when the log knows the ledger, the ledger's current scope. The durations of the
// non-verification collectives are also kept in call order in `coll_seconds`, so entry i is the
// ledger's entry i when Timed sits inside Ledgered. Phases with a key sum their seconds under it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/observe/ledger.hpp"

namespace shardalg::verify {

using Clock = std::chrono::steady_clock;

/// What a timed collective moved (the arguments of its trace event).
struct CollectiveArgs {
  std::size_t elements = 0, bytes = 0;
  std::string layouts;  // "R -> C"
  std::string dtype;
  std::optional<std::string> scope;  // the ledger's scope when it ran
};

/// One complete event ("ph": "X") of the timeline: a phase or a collective.
struct TraceEvent {
  std::string name, cat;
  double ts_us = 0, dur_us = 0;
  std::optional<CollectiveArgs> args;  // collectives only
};

/// One rank's timeline.
struct EventLog {
  Clock::time_point t0 = Clock::now();
  std::vector<TraceEvent> events;
  std::vector<double> coll_seconds;              // ledgered collectives, in call order
  Ledger* ledger = nullptr;                      // for the scope of each collective
  std::map<std::string, double> phase_seconds;   // phase key → summed seconds

  [[nodiscard]] double us(Clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - t0).count(); }

  /// Times its own lifetime: one event, and its seconds added under `key` when one is given.
  class Phase {
   public:
    Phase(EventLog& log, std::string name, std::string cat, std::string key = {})
        : log_(&log), name_(std::move(name)), cat_(std::move(cat)), key_(std::move(key)), start_(Clock::now()) {}
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;
    ~Phase() {
      const auto end = Clock::now();
      log_->events.push_back({name_, cat_, log_->us(start_), std::chrono::duration<double, std::micro>(end - start_).count(), {}});
      if (!key_.empty()) log_->phase_seconds[key_] += std::chrono::duration<double>(end - start_).count();
    }

   private:
    EventLog* log_;
    std::string name_, cat_, key_;
    Clock::time_point start_;
  };
};

/// The timing decorator (the same pattern as Ledgered<C> in observe/ledger.hpp). Element counts are
/// the ledger's V: n for all_reduce, P·n for all_gather and reduce_scatter, P²·n for all_to_all.
template <Communicator C>
class Timed {
 public:
  Timed(C inner, EventLog& log) : inner_(std::move(inner)), log_(&log) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::uintptr_t key() const { return inner_.key(); }

  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    timed(CollectiveKind::all_reduce, n, t, i, [&] { inner_.all_reduce(b, n, t, op, i); });
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    timed(CollectiveKind::all_gather, n * size(), t, i, [&] { inner_.all_gather(s, r, n, t, i); });
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    timed(CollectiveKind::reduce_scatter, n * size(), t, i, [&] { inner_.reduce_scatter(s, r, n, t, op, i); });
  }
  void all_to_all(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    timed(CollectiveKind::all_to_all, n * size() * size(), t, i, [&] { inner_.all_to_all(s, r, n, t, i); });
  }
  void broadcast(void* b, std::size_t n, DType t, int root, const CallInfo& i = {}) {
    timed(CollectiveKind::broadcast, n, t, i, [&] { inner_.broadcast(b, n, t, root, i); });
  }
  void send(const void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    timed(CollectiveKind::send, n, t, i, [&] { inner_.send(b, n, t, peer, i); });
  }
  void recv(void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    timed(CollectiveKind::recv, n, t, i, [&] { inner_.recv(b, n, t, peer, i); });
  }
  void barrier() { inner_.barrier(); }
  /// Timed as the ledger records it: all_to_all of Σ send_counts, or the uneven collective it
  /// carries (CallInfo::uneven_as) with the whole matrix's elements.
  template <class Self = C>
    requires VariableAllToAll<Self>
  void all_to_allv(const void* s, const std::size_t* sc, void* r, const std::size_t* rc, DType t, const CallInfo& i = {}) {
    std::size_t total = 0;
    for (int p = 0; p < size(); ++p) total += sc[p];
    timed(i.uneven_as ? *i.uneven_as : CollectiveKind::all_to_all, i.uneven_as ? i.uneven_elements : total, t, i,
          [&] { inner_.all_to_allv(s, sc, r, rc, t, i); });
  }

 private:
  template <class F>
  void timed(CollectiveKind k, std::size_t elements, DType t, const CallInfo& i, F&& f) {
    const auto start = Clock::now();
    f();
    const auto end = Clock::now();
    const double us = std::chrono::duration<double, std::micro>(end - start).count();
    CollectiveArgs args{elements, elements * size_of(t), std::string(i.layout_in) + " -> " + std::string(i.layout_out),
                        std::string(to_string(t)), std::nullopt};
    if (log_->ledger) args.scope = log_->ledger->current_scope();
    log_->events.push_back({std::string(to_string(k)), i.verification ? "verification" : "collective", log_->us(start), us,
                            std::move(args)});
    if (!i.verification) log_->coll_seconds.push_back(us * 1e-6);
  }

  C inner_;
  EventLog* log_;
};

}  // namespace shardalg::verify
