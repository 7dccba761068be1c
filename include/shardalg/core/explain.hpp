// shardalg/core/explain.hpp — how an op enters the explain log (observe/explain_log.hpp), through
// the group's Recorder (comm/recorder.hpp).
//
// Each typed op opens an ExplainOp for its lifetime; when the group's ledger is explaining, the
// op's layouts are written in notation and the collectives it issues are listed under it:
//
//   auto e = explain_op(g, "matmul", dtype_of<T>, {note(a), " · ", note(b), " → ", note(m, n, LayoutKind::col)});
//
// The pieces are data (words, numbers, a tensor's shape and layout), formatted by one function
// only when the log is on: without a ledger, or with explain off, the op pays a pointer test and
// a few stores, and the library's ops add no code of their own per instantiation. A user's own op
// can do the same (or pass a function that returns the text), so their program's log names it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
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

/// A piece of an op's explain text: words, a number, or a tensor's notation ("8x16[C]").
class Note {
 public:
  Note(std::string_view text) : text_(text) {}  // NOLINT: implicit, the words between tensors
  Note(const char* text) : text_(text) {}       // NOLINT
  Note(Index rows, Index cols, LayoutKind k) : kind_(Kind::tensor), rows_(rows), cols_(cols), layout_(k) {}
  static Note number(long long v) {
    Note n("");
    n.kind_ = Kind::number;
    n.rows_ = v;
    return n;
  }
  /// Appends this piece to `out`.
  void write(std::string& out) const {
    switch (kind_) {
      case Kind::text: out += text_; return;
      case Kind::number: out += std::to_string(rows_); return;
      case Kind::tensor: out += notation(rows_, cols_, layout_); return;
    }
  }

 private:
  enum class Kind : unsigned char { text, number, tensor };
  Kind kind_ = Kind::text;
  std::string_view text_;
  long long rows_ = 0, cols_ = 0;
  LayoutKind layout_ = LayoutKind::replicated;
};
/// A tensor's piece: its global shape and layout.
template <class T, class L, class B>
Note note(const Sharded<T, L, B>& x) {
  return Note(x.rows(), x.cols(), L::kind);
}
/// The piece of a global shape in layout `k`.
inline Note note(Index rows, Index cols, LayoutKind k) { return Note(rows, cols, k); }

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
  requires std::is_invocable_r_v<std::string, F&>
[[nodiscard]] ExplainOp explain_op(const Group& g, std::string_view op, DType t, F&& layouts) {
  Recorder* r = g.recorder();
  if (!r || !r->explaining()) return {};
  return ExplainOp(r, op, t, std::forward<F>(layouts)());
}
/// The same with the text as pieces, written one after another only when the log is on.
[[nodiscard]] SHARDALG_FUNC ExplainOp explain_op(const Group& g, std::string_view op, DType t, std::initializer_list<Note> layouts);
#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp
SHARDALG_FUNC ExplainOp explain_op(const Group& g, std::string_view op, DType t, std::initializer_list<Note> layouts) {
  Recorder* r = g.recorder();
  if (!r || !r->explaining()) return {};
  std::string text;
  for (const Note& n : layouts) n.write(text);
  return ExplainOp(r, op, t, std::move(text));
}
#endif

}  // namespace shardalg
