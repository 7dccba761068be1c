// shardalg/core/explain.hpp — how an op enters the explain log (observe/explain_log.hpp), through
// the group's Recorder (comm/recorder.hpp).
//
// Each typed op opens an ExplainOp for its lifetime; when the group's ledger is explaining, the
// op's layouts are written in notation and the collectives it issues are listed under it:
//
//   auto e = explain_op(g, "matmul", dtype_of<T>, [&] { return cat(notation(a), " · ", notation(b), " → ", …); });
//
// Without a ledger, or with explain off, it is a pointer test: the text is never formatted.
// A user's own op can do the same, so their program's log names it.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// "8x16[C]": the global shape and the layout of a tensor.
template <class T, class L, class B>
std::string notation(const Sharded<T, L, B>& x) {
  return detail::cat(x.rows(), "x", x.cols(), "[", L::notation, "]");
}
/// The same for a global shape in layout `k`.
inline std::string notation(Index rows, Index cols, LayoutKind k) {
  return detail::cat(rows, "x", cols, "[", notation(k), "]");
}

/// An op in the explain log for as long as it lives (RAII; nests).
class ExplainOp {
 public:
  ExplainOp() = default;
  ExplainOp(Recorder* r, std::string_view op, DType t, std::string layouts) : rec_(r) {
    if (rec_) rec_->open_op(std::string(op), std::string(to_string(t)), std::move(layouts));
  }
  ExplainOp(const ExplainOp&) = delete;
  ExplainOp& operator=(const ExplainOp&) = delete;
  ExplainOp(ExplainOp&& o) noexcept : rec_(std::exchange(o.rec_, nullptr)) {}
  ~ExplainOp() {
    if (rec_) rec_->close_op();
  }

 private:
  Recorder* rec_ = nullptr;
};

/// Opens `op` on `g`'s recorder when it is explaining; `layouts()` is called only then.
template <class F>
[[nodiscard]] ExplainOp explain_op(const Group& g, std::string_view op, DType t, F&& layouts) {
  Recorder* r = g.recorder();
  if (!r || !r->explaining()) return {};
  return ExplainOp(r, op, t, std::forward<F>(layouts)());
}

}  // namespace shardalg
