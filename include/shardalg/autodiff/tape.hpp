// shardalg/autodiff/tape.hpp — reverse-mode differentiation of sharded programs: the tape and the
// differentiable value.
//
//   ad::Tape tape;
//   auto x  = tape.input(shard<Invariant>(X, g));          // x[I]
//   auto w1 = tape.input(shard<ColSharded>(W1, g));        // w1[C]
//   auto h  = ad::map(ad::matmul(ad::copy_to(x), w1), ad::gelu);   // f: I → R;  X[R] · W1[C] → H[C]
//   auto z  = ad::all_reduce<Invariant>(ad::matmul(h, w2));         // H[C] · W2[Row] → Partial → g → I
//   tape.backward(ad::sum(z));                             // seeds d(sum) = 1 in cot(I) = I
//   Sharded<double, ColSharded> dw1 = tape.grad(w1);       // cot(C) = C
//   Sharded<double, Invariant>  dx  = tape.grad(x);        // cot(I) = I: f's adjoint all-reduced it
//
// A `Var<T, L>` is a value `Sharded<T, L>` and its place on a tape. Every differentiable op
// (autodiff/*.hpp) computes its value with the core op — so an invalid layout is the core's
// compile error with its ID — and records a backward step that turns its output's cotangent into
// its inputs' cotangents. Cotangents are typed by the table of docs/design.md §5a:
//
//   cot(R) = Partial   cot(I) = I   cot(Partial) = R   cot(Row) = Row   cot(C) = C
//
// so the gradient of a replicated parameter used in per-rank work comes out Partial and cannot
// reach an optimizer before it is all-reduced (E130), and the backward's collectives are the
// adjoints of the forward's (f's all_reduce, all_gather's reduce_scatter, …), recorded by the
// ledger like any other collective (in the scope "bwd" when the output's group has a ledger).
//
// Design: a tape of closures. Each op appends one backward step, which captures the tape, its
// output's slot and its inputs' slots (indices) and the values its adjoint needs; `backward` runs
// the steps in reverse. A slot holds its value's cotangent, typed Sharded<T, cot(L)>, created on
// first accumulation (a value no path reaches has cotangent 0: `grad` returns zeros). Memory: the
// values a step captures live until the tape is destroyed or `clear()`ed — the same activations
// the hand-written layers keep in their caches (measured in bench/autodiff.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/autodiff/invalid.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/bridge/dense.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg::ad {

/// A backend's local matrix (the autodiff ops run on the CPU backend: Eigen expressions).
template <class T, class B>
using Mat = typename B::template matrix<T>;

/// The cotangent layout of L (docs/design.md §5a).
template <Layout L>
using cot_t = layout_t<cotangent(L::kind)>;

/// Misuse of the tape at run time (a value of another tape, backward twice, a gradient of a value
/// that is not on the tape); the message names it.
struct AutodiffError : Error {
  using Error::Error;
};

class Tape;

/// A differentiable value: Sharded<T, L, B> and its slot on a tape (npos: a constant).
template <Element T, Layout L, class B = CpuBackend>
class Var {
 public:
  using value_type = T;
  using layout = L;
  using backend = B;
  using Value = Sharded<T, L, B>;
  using Cotangent = Sharded<T, cot_t<L>, B>;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  Var() = default;
  Var(Tape* tape, std::size_t slot, Value v)
      : tape_(tape), slot_(slot), value_(std::make_shared<const Value>(std::move(v))) {}

  /// The value (shared by the copies of this Var and by the backward steps that need it).
  [[nodiscard]] const Value& value() const { return *value_; }
  [[nodiscard]] const std::shared_ptr<const Value>& shared() const { return value_; }
  [[nodiscard]] Tape* tape() const { return tape_; }
  [[nodiscard]] std::size_t slot() const { return slot_; }
  [[nodiscard]] bool tracked() const { return tape_ != nullptr && slot_ != npos; }
  [[nodiscard]] Index rows() const { return value_->rows(); }
  [[nodiscard]] Index cols() const { return value_->cols(); }
  [[nodiscard]] const Group& group() const { return value_->group(); }
  /// The same slot, without the value (what a backward step keeps to accumulate into).
  [[nodiscard]] Var handle() const {
    Var h;
    h.tape_ = tape_;
    h.slot_ = tracked() ? slot_ : npos;
    return h;
  }

 private:
  Tape* tape_ = nullptr;
  std::size_t slot_ = npos;
  std::shared_ptr<const Value> value_;
};

template <class X>
struct is_var : std::false_type {};
template <class T, class L, class B>
struct is_var<Var<T, L, B>> : std::true_type {};
template <class X>
concept VarType = is_var<std::remove_cvref_t<X>>::value;

namespace detail {
struct SlotBase {
  virtual ~SlotBase() = default;
};
/// The cotangent of one value: Sharded<T, CL, B>, absent until something accumulates into it.
template <class T, class CL, class B>
struct Slot : SlotBase {
  std::optional<Sharded<T, CL, B>> grad;
  Index rows = 0, cols = 0;
  Group group;
};
}  // namespace detail

class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;  // steps point at this tape
  Tape& operator=(const Tape&) = delete;

  /// A value to differentiate with respect to (an input or a parameter): its gradient is kept.
  template <Element T, Layout L, class B>
  Var<T, L, B> input(Sharded<T, L, B> x) {
    detail_check(x.group(), "ad::Tape::input");
    return make<T, L, B>(std::move(x));
  }
  /// A value that is not differentiated (no slot; no step accumulates into it).
  template <Element T, Layout L, class B>
  Var<T, L, B> constant(Sharded<T, L, B> x) const {
    return Var<T, L, B>(nullptr, Var<T, L, B>::npos, std::move(x));
  }

  /// A new value produced by an op (autodiff/*.hpp): a fresh slot.
  template <Element T, Layout L, class B>
  Var<T, L, B> make(Sharded<T, L, B> v) {
    auto s = std::make_unique<detail::Slot<T, cot_t<L>, B>>();
    s->rows = v.rows();
    s->cols = v.cols();
    s->group = v.group();
    slots_.push_back(std::move(s));
    const auto bytes = static_cast<std::size_t>(v.local().size()) * sizeof(T);
    Var<T, L, B> out(this, slots_.size() - 1, std::move(v));
    values_.emplace_back(std::weak_ptr<const void>(out.shared()), bytes);
    return out;
  }
  /// Count a buffer a backward step keeps besides the Vars' values (a norm's x̂, attention's
  /// probabilities) in held_bytes() while it lives.
  void note(const std::shared_ptr<const void>& buffer, std::size_t bytes) { values_.emplace_back(buffer, bytes); }
  /// Bytes of the values on this tape still alive — held by the steps that need them for the
  /// backward pass, or by the caller's Vars (the derived backward's activation memory).
  [[nodiscard]] std::size_t held_bytes() const {
    std::size_t n = 0;
    for (const auto& [w, b] : values_) n += w.expired() ? 0 : b;
    return n;
  }
  /// The op's backward step (run in reverse order by backward()).
  void on_backward(std::function<void()> step) { steps_.push_back(std::move(step)); }

  /// The cotangent accumulated so far for `x`'s slot, or nullptr (none yet: it is zero).
  template <Element T, Layout L, class B>
  const Sharded<T, cot_t<L>, B>* cotangent(const Var<T, L, B>& x) const {
    if (!x.tracked()) return nullptr;
    const auto& g = slot<T, L, B>(x.slot()).grad;
    return g ? &*g : nullptr;
  }
  /// Add `g` to x's cotangent (a constant takes nothing).
  template <Element T, Layout L, class B>
  void accumulate(const Var<T, L, B>& x, Sharded<T, cot_t<L>, B> g) {
    if (!x.tracked()) return;
    if (x.tape() != this) throw AutodiffError("ad::Tape: a value of another tape");
    auto& s = slot<T, L, B>(x.slot());
    if (s.grad) *s.grad = *s.grad + g;
    else s.grad = std::move(g);
  }

  /// Give output y the cotangent dy (of layout cot(L)); several outputs may be seeded before
  /// run(): the pass then differentiates Σ_o ⟨y_o, dy_o⟩.
  template <Element T, Layout L, class B>
  void seed(const Var<T, L, B>& y, Sharded<T, cot_t<L>, B> dy) {
    if (!y.tracked() || y.tape() != this) throw AutodiffError("ad::Tape::seed: the output is not a value of this tape");
    if (done_) throw AutodiffError("ad::Tape::seed: the backward pass has run on this tape (build a new tape for another pass)");
    if (dy.rows() != y.rows() || dy.cols() != y.cols())
      throw ShapeError(shardalg::detail::cat("ad::Tape::seed: the cotangent is ", dy.rows(), "x", dy.cols(), ", the output ",
                                             y.rows(), "x", y.cols()));
    if (!group_.valid()) group_ = y.group();
    accumulate(y, std::move(dy));
  }
  /// Run every step in reverse (once per tape); the collectives are ledgered in scope "bwd".
  void run() {
    if (done_) throw AutodiffError("ad::Tape::backward: already run on this tape (build a new tape for another pass)");
    if (!group_.valid()) throw AutodiffError("ad::Tape::run: no output was seeded");
    done_ = true;
    auto sc = scope(group_, "bwd");
    for (std::size_t i = steps_.size(); i-- > 0;) steps_[i]();
  }
  /// seed(y, dy), then run().
  template <Element T, Layout L, class B>
  void backward(const Var<T, L, B>& y, Sharded<T, cot_t<L>, B> dy) {
    seed(y, std::move(dy));
    run();
  }
  /// backward from a 1×1 output (a loss) with d(loss) = 1: in cot(L) — every rank 1 for I and
  /// Partial's R; rank 0 only for R, whose cotangent is Partial (the summands add up to 1).
  template <Element T, Layout L, class B>
  void backward(const Var<T, L, B>& y) {
    if (y.rows() != 1 || y.cols() != 1)
      throw AutodiffError(shardalg::detail::cat("ad::Tape::backward: the output is ", y.rows(), "x", y.cols(),
                                                "; give its cotangent, or reduce it to 1x1 (ad::sum)"));
    using CL = cot_t<L>;
    typename B::template matrix<T> one = B::template zeros<T>(1, 1);
    if (!std::is_same_v<CL, Partial> || y.group().rank() == 0) one = Mat<T, B>::Constant(1, 1, T(1));
    backward(y, Sharded<T, CL, B>(std::move(one), 1, 1, y.group()));
  }

  /// An invalid op's result (its diagnostic has fired): nothing to run, no second error.
  void backward(InvalidOperation) {}
  InvalidOperation grad(InvalidOperation) const { return {}; }

  /// x's gradient, in cot(L): zeros of x's shape when no path from the output reached it.
  template <Element T, Layout L, class B>
  Sharded<T, cot_t<L>, B> grad(const Var<T, L, B>& x) const {
    if (!x.tracked() || x.tape() != this) throw AutodiffError("ad::Tape::grad: the value is not on this tape (a constant?)");
    const auto& s = slot<T, L, B>(x.slot());
    if (s.grad) return *s.grad;
    const auto [lr, lc] = local_shape(cot_t<L>::kind, s.rows, s.cols, s.group.size(), s.group.rank());
    return Sharded<T, cot_t<L>, B>(B::template zeros<T>(lr, lc), s.rows, s.cols, s.group);
  }

  [[nodiscard]] std::size_t size() const { return steps_.size(); }
  /// Drop every step and slot (and the values they hold).
  void clear() {
    steps_.clear();
    slots_.clear();
    values_.clear();
    group_ = Group();
    done_ = false;
  }

 private:
  template <class T, class L, class B>
  detail::Slot<T, cot_t<L>, B>& slot(std::size_t i) const {
    return static_cast<detail::Slot<T, cot_t<L>, B>&>(*slots_.at(i));
  }
  static void detail_check(const Group& g, const char* what) { shardalg::detail::check_operand(g, what); }

  std::vector<std::unique_ptr<detail::SlotBase>> slots_;
  std::vector<std::function<void()>> steps_;
  std::vector<std::pair<std::weak_ptr<const void>, std::size_t>> values_;  // for held_bytes()
  Group group_;  // the first seeded output's: the ledger scope of the backward pass
  bool done_ = false;
};

namespace detail {
/// The tape of an op's operands: the first tracked one's; every tracked one must be on it.
template <class... V>
Tape* tape_of(const V&... v) {
  Tape* t = nullptr;
  auto pick = [&](Tape* x) {
    if (!x) return;
    if (t && t != x) throw AutodiffError("ad: operands on different tapes");
    t = x;
  };
  (pick(v.tracked() ? v.tape() : nullptr), ...);
  return t;
}
/// The result of an op on values v: on the operands' tape when one is tracked, with `step`
/// (given the output Var) as its backward; else a constant.
template <class T, class L, class B, class Step, class... V>
Var<T, L, B> record(Sharded<T, L, B> value, Step step, const V&... v) {
  Tape* t = tape_of(v...);
  if (!t) return Var<T, L, B>(nullptr, Var<T, L, B>::npos, std::move(value));
  Var<T, L, B> out = t->make(std::move(value));
  t->on_backward([t, o = out.handle(), step = std::move(step)]() mutable {
    if (const auto* g = t->cotangent(o)) step(*t, *g);
  });
  return out;
}
}  // namespace detail

}  // namespace shardalg::ad
