// shardalg/core/elementwise.hpp — elementwise and row-wise operations, each checked against
// the rules in base/rules.hpp:
//
//   A[L] + B[L] → [L]            any L, Partial too (linear)              else E112
//   α · A[L]    → [L]            any L; α any arithmetic scalar, converted to the element type
//   f(A[L])     → [L]            non-linear f: not on Partial               E110
//   A ⊙ B       → same layout; Partial ⊙ R → Partial; Partial ⊙ Partial      E113 / E117
//   X + b       → b[R] for X[R], X[Row]; b[C] for X[C]; never X[Partial]    E111 / E116
//   softmax_rows(X): X[R] or X[Row]                                           E114 / E115
//   col_sum(X[Row]) → [Partial] (the norm-weight gradient under sequence parallelism)
//   row_sum(X[C])   → [Partial] (the partial statistics of a parallel LayerNorm)
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

#include "shardalg/base/functors.hpp"
#include "shardalg/base/rules.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

namespace detail {
/// Checks the operands of an elementwise binary op (empty, then shape, then group) and returns
/// the handle its result carries (result_group: the ledgered one of a mixed pair).
template <class T, class L, class B>
const Group& same_shape_group(const Sharded<T, L, B>& a, const auto& b, std::string_view op) {
  check_operand(a.group(), op);
  check_operand(b.group(), op);
  if (a.rows() != b.rows() || a.cols() != b.cols())
    throw ShapeError(cat(op, ": shapes differ: ", a.rows(), "x", a.cols(), " and ", b.rows(), "x", b.cols()));
  return result_group(a.group(), b.group(), op);
}
template <class T, class L, class B, class Local>
Sharded<T, L, B> like(const Group& g, Local local, Index rows, Index cols) {
  return Sharded<T, L, B>(std::move(local), rows, cols, g);
}
}  // namespace detail

template <class T, class LA, class LB, class B>
auto operator+(const Sharded<T, LA, B>& a, const Sharded<T, LB, B>& b) {
  constexpr auto rule = rules::add(LA::kind, LB::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, LA, LB>();
  } else {
    const Group& g = detail::same_shape_group(a, b, "add");
    auto e = explain_op(g, "add", dtype_of<T>, {note(a), " + ", note(b), " → ", note(a)});
    return detail::like<T, LA, B>(g, B::zip(a.local(), b.local(), fn::plus{}), a.rows(), a.cols());
  }
}

template <class T, class LA, class LB, class B>
auto operator-(const Sharded<T, LA, B>& a, const Sharded<T, LB, B>& b) {
  constexpr auto rule = rules::add(LA::kind, LB::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, LA, LB>();
  } else {
    const Group& g = detail::same_shape_group(a, b, "sub");
    auto e = explain_op(g, "sub", dtype_of<T>, {note(a), " − ", note(b), " → ", note(a)});
    return detail::like<T, LA, B>(g, B::zip(a.local(), b.local(), fn::minus{}), a.rows(), a.cols());
  }
}

/// A scalar that may scale a tensor of element type T: any arithmetic type (`2 * x` on a double
/// tensor, `0.5 * x` on a float one), converted to T with static_cast, or T itself (a half type).
template <class S, class T>
concept ScalarFor = std::is_arithmetic_v<S> || std::same_as<S, T>;

/// α · A[L] → [L]: linear, so every layout, Partial included (Σ_r α·Z_r = α·Σ_r Z_r). α is
/// converted to T first: on an integer tensor 0.5 becomes 0.
template <class S, class T, class L, class B>
  requires ScalarFor<S, T>
Sharded<T, L, B> operator*(S alpha, const Sharded<T, L, B>& a) {
  detail::check_operand(a.group(), "scale");
  auto e = explain_op(a.group(), "scale", dtype_of<T>, {"α · ", note(a), " → ", note(a)});
  return detail::like<T, L, B>(a.group(), B::map(a.local(), fn::scale<T>{static_cast<T>(alpha)}), a.rows(),
                               a.cols());
}
template <class S, class T, class L, class B>
  requires ScalarFor<S, T>
Sharded<T, L, B> operator*(const Sharded<T, L, B>& a, S alpha) {
  return alpha * a;
}

/// f(A) for a non-linear elementwise f (GeLU, exp, …): not on Partial.
template <class T, class L, class B, class F>
auto map(const Sharded<T, L, B>& a, F f) {
  constexpr auto rule = rules::nonlinear(L::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, T>();
  } else {
    detail::check_operand(a.group(), "map");
    auto e = explain_op(a.group(), "map", dtype_of<T>, {"f(", note(a), ") → ", note(a)});
    return detail::like<T, L, B>(a.group(), B::map(a.local(), f), a.rows(), a.cols());
  }
}

/// A ⊙ B.
template <class T, class LA, class LB, class B>
auto hadamard(const Sharded<T, LA, B>& a, const Sharded<T, LB, B>& b) {
  constexpr auto rule = rules::hadamard(LA::kind, LB::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, LA, LB>();
  } else {
    const Group& g = detail::same_shape_group(a, b, "hadamard");
    auto e = explain_op(g, "hadamard", dtype_of<T>, {note(a), " ⊙ ", note(b), " → ", note(a.rows(), a.cols(), rule.result)});
    return detail::like<T, layout_t<rule.result>, B>(g, B::zip(a.local(), b.local(), fn::times{}), a.rows(),
                                                     a.cols());
  }
}

/// X + 1·b: a bias b[1, K] broadcast over the rows of X[·, K].
template <class T, class LX, class LBias, class B>
auto add_bias(const Sharded<T, LX, B>& x, const Sharded<T, LBias, B>& b) {
  constexpr auto rule = rules::bias(LX::kind, LBias::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, LX, LBias>();
  } else {
    detail::check_operand(x.group(), "add_bias");
    detail::check_operand(b.group(), "add_bias");
    if (b.rows() != 1 || b.cols() != x.cols())
      throw ShapeError(detail::cat("add_bias: bias is ", b.rows(), "x", b.cols(), " but the activation has ",
                                   x.cols(), " columns (expected 1x", x.cols(), ")"));
    const Group& g = detail::result_group(x.group(), b.group(), "add_bias");
    auto e = explain_op(g, "add_bias", dtype_of<T>, {note(x), " + 1·", note(b), " → ", note(x)});
    return detail::like<T, LX, B>(g, B::add_row(x.local(), b.local()), x.rows(), x.cols());
  }
}

/// Softmax over each row (a row-wise op: every rank must hold whole rows).
template <class T, class L, class B>
auto softmax_rows(const Sharded<T, L, B>& x) {
  constexpr auto rule = rules::rowwise(L::kind);
  if constexpr (!rule.valid) {
    return diagnose<rule.error, T>();
  } else {
    detail::check_operand(x.group(), "softmax_rows");
    if (x.cols() == 0 && x.rows() > 0)
      throw ShapeError(detail::cat("softmax_rows: ", x.rows(), "x0 has no columns (a softmax over 0 entries is undefined)"));
    auto e = explain_op(x.group(), "softmax_rows", dtype_of<T>,
                        {"softmax(", note(x), ") → ", note(x)});
    return detail::like<T, L, B>(x.group(), B::softmax_rows(x.local()), x.rows(), x.cols());
  }
}

/// Σ_i X[i, :] → [1, K]. From X[Row] the result is Partial: each rank summed only its rows.
template <class T, class L, class B>
auto col_sum(const Sharded<T, L, B>& x) {
  constexpr auto rule = rules::col_sum(L::kind);
  detail::check_operand(x.group(), "col_sum");
  auto e = explain_op(x.group(), "col_sum", dtype_of<T>,
                      {"Σ_i ", note(x), " → ", note(1, x.cols(), rule.result)});
  return Sharded<T, layout_t<rule.result>, B>(B::col_sum(x.local()), 1, x.cols(), x.group());
}

/// Σ_k X[:, k] → [I, 1]. From X[C] the result is Partial: each rank summed only its columns.
template <class T, class L, class B>
auto row_sum(const Sharded<T, L, B>& x) {
  constexpr auto rule = rules::row_sum(L::kind);
  detail::check_operand(x.group(), "row_sum");
  auto e = explain_op(x.group(), "row_sum", dtype_of<T>,
                      {"Σ_k ", note(x), " → ", note(x.rows(), 1, rule.result)});
  return Sharded<T, layout_t<rule.result>, B>(B::row_sum(x.local()), x.rows(), 1, x.group());
}

}  // namespace shardalg
