// shardalg/comm/recorder.hpp — what a group's handle records into, as the floors below observe/
// see it: scope labels and the explain log's op records. observe/ledger.hpp's Ledger is the one
// implementation; a typed op (core/explain.hpp) or a layer (scope(g, "mlp.fwd")) reaches it through
// Group::recorder() and never includes observe/.
#pragma once

#include <string>
#include <utility>

namespace shardalg {

class Recorder {
 public:
  virtual ~Recorder() = default;
  /// The collectives recorded until the matching pop_scope() run under `label` (nests with '/').
  virtual void push_scope(std::string label) = 0;
  virtual void pop_scope() = 0;
  /// Whether the explain log is on: an op formats its layouts only then.
  [[nodiscard]] virtual bool explaining() const = 0;
  /// An op starts: the collectives recorded until close_op() are its own. Ops nest.
  virtual void open_op(std::string op, std::string dtype, std::string layouts) = 0;
  virtual void close_op() = 0;
};

/// A scope label for as long as it lives; with no recorder it does nothing, so code need not
/// branch on whether a group records.
class RecorderScope {
 public:
  RecorderScope() = default;
  RecorderScope(Recorder* r, std::string label) : r_(r) {
    if (r_) r_->push_scope(std::move(label));
  }
  RecorderScope(const RecorderScope&) = delete;
  RecorderScope& operator=(const RecorderScope&) = delete;
  RecorderScope(RecorderScope&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  RecorderScope& operator=(RecorderScope&& o) noexcept {
    if (this != &o) {
      reset();
      r_ = std::exchange(o.r_, nullptr);
    }
    return *this;
  }
  ~RecorderScope() { reset(); }
  /// Ends the scope now.
  void reset() {
    if (r_) std::exchange(r_, nullptr)->pop_scope();
  }

 private:
  Recorder* r_ = nullptr;
};

}  // namespace shardalg
