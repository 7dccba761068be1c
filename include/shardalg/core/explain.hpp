// shardalg/core/explain.hpp — how an op enters the explain log (comm/explain_log.hpp).
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

#include "shardalg/comm/ledger.hpp"
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
  ExplainOp(Ledger* l, std::string_view op, DType t, std::string layouts) : ledger_(l) {
    if (ledger_) ledger_->open_op(std::string(op), std::string(to_string(t)), std::move(layouts));
  }
  ExplainOp(const ExplainOp&) = delete;
  ExplainOp& operator=(const ExplainOp&) = delete;
  ExplainOp(ExplainOp&& o) noexcept : ledger_(std::exchange(o.ledger_, nullptr)) {}
  ~ExplainOp() {
    if (ledger_) ledger_->close_op();
  }

 private:
  Ledger* ledger_ = nullptr;
};

/// Opens `op` on `g`'s ledger when it is explaining; `layouts()` is called only then.
template <class F>
[[nodiscard]] ExplainOp explain_op(const Group& g, std::string_view op, DType t, F&& layouts) {
  Ledger* l = g.ledger();
  if (!l || !l->explaining()) return {};
  return ExplainOp(l, op, t, std::forward<F>(layouts)());
}

}  // namespace shardalg
