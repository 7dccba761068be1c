// shardalg/core/matmul.hpp — C = op(A) · op(B) with the result layout from the rule table.
//
//   X[R] · W[C]        → Y[C]        local
//   H[C] · W[Row]      → Z[Partial]  local; all_reduce → R or reduce_scatter → Row finishes it
//   transpose(X)[C]    — X[Row] seen transposed: the backward pass's Xᵀ · dY needs no copy
//
// Every valid product is local; an invalid pair is a compile error [shardalg.E10x] naming the
// collective that fixes it (see base/errors.hpp).
#pragma once

#include <type_traits>

#include "shardalg/base/rules.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// A transposed view of a Sharded matrix: layout Rowᵀ = C, Cᵀ = Row; no data moves.
template <class T, class L, class B>
struct Transposed {
  const Sharded<T, L, B>& of;
};

template <class T, class L, class B>
Transposed<T, L, B> transpose(const Sharded<T, L, B>& x) {
  return {x};
}
template <class T, class L, class B>
void transpose(const Sharded<T, L, B>&&) = delete;  // a view of a temporary would dangle

namespace detail {
template <class X>
struct operand;
template <class T, class L, class B>
struct operand<Sharded<T, L, B>> {
  using value_type = T;
  using backend = B;
  static constexpr LayoutKind kind = L::kind;
  static const Sharded<T, L, B>& tensor(const Sharded<T, L, B>& x) { return x; }
  static constexpr bool trans = false;
};
template <class T, class L, class B>
struct operand<Transposed<T, L, B>> {
  using value_type = T;
  using backend = B;
  static constexpr LayoutKind kind = transpose(L::kind);
  static const Sharded<T, L, B>& tensor(const Transposed<T, L, B>& x) { return x.of; }
  static constexpr bool trans = true;
};
template <class X>
concept MatmulOperand = requires { typename operand<std::remove_cvref_t<X>>::value_type; };

template <class X>
MatView<typename operand<X>::value_type> view_of(const X& x) {
  using O = operand<X>;
  const auto& t = O::tensor(x);
  return O::backend::view(t.local(), O::trans);
}
/// "16x8[Row]" for a tensor, "(16x8[Row])ᵀ" for its transposed view (which acts as 8x16[C]).
/// An operand's explain pieces: I = 0, 1, 2 are "(" (transposed) or "", the tensor, ")ᵀ" or "".
template <int I, class X>
Note operand_note(const X& x) {
  using O = operand<X>;
  if constexpr (I == 1) return note(O::tensor(x));
  else if constexpr (I == 0) return O::trans ? "(" : "";
  else return O::trans ? ")ᵀ" : "";
}
/// "matmul<R>", "matmul<C>", …: the name of a planned product in the explain log.
inline std::string_view planned_matmul_name(LayoutKind k) {
  switch (k) {
    case LayoutKind::replicated: return "matmul<R>";
    case LayoutKind::row: return "matmul<Row>";
    case LayoutKind::col: return "matmul<C>";
    case LayoutKind::partial: return "matmul<Partial>";
    case LayoutKind::invariant: return "matmul<I>";
  }
  return "matmul<?>";
}
template <class X>
std::pair<Index, Index> global_shape(const X& x) {
  using O = operand<X>;
  const auto& t = O::tensor(x);
  return O::trans ? std::pair{t.cols(), t.rows()} : std::pair{t.rows(), t.cols()};
}
}  // namespace detail

/// The rule for operand types A and B (Sharded or Transposed).
template <class A, class B>
inline constexpr MatmulRule matmul_rule_v =
    matmul_rule(detail::operand<std::remove_cvref_t<A>>::kind, detail::operand<std::remove_cvref_t<B>>::kind);

/// The result layout of A · B, when valid.
template <class A, class B>
using matmul_result_layout_t = layout_t<matmul_rule_v<A, B>.result>;

namespace detail {
/// The local GEMM of a valid rule on this rank: op(A)_r · op(B)_r (with the free slice of R·Row
/// or C·R) into a fresh block of the result's local shape. Shared by matmul and matmul<To>.
template <class T, class Bk>
typename Bk::template matrix<T> local_product(MatView<T> va, MatView<T> vb, const MatmulRule& rule, Index m,
                                              Index n, int rank, int p) {
  // R · Row: rank r holds rows J_r of B; it multiplies the matching columns of A.
  if (rule.form == LocalForm::slice_a_cols) va = va.slice_cols(block_offset(va.cols, p, rank), vb.rows);
  // C · R: rank r holds columns J_r of A; it multiplies the matching rows of B.
  if (rule.form == LocalForm::slice_b_rows) vb = vb.slice_rows(block_offset(vb.rows, p, rank), va.cols);
  const auto [lr, lc] = local_shape(rule.result, m, n, p, rank);
  auto c = Bk::template empty<T>(lr, lc);
  Bk::gemm(T(1), va, vb, T(0), c);
  return c;
}
}  // namespace detail

template <detail::MatmulOperand A, detail::MatmulOperand Bop>
auto matmul(const A& a, const Bop& b) {
  using OA = detail::operand<A>;
  using OB = detail::operand<Bop>;
  using T = typename OA::value_type;
  constexpr MatmulRule rule = matmul_rule(OA::kind, OB::kind);
  if constexpr (!std::is_same_v<T, typename OB::value_type>) {
    return diagnose<Diag::dtype_mismatch, A>();
  } else if constexpr (!rule.valid) {
    return diagnose<rule.error, layout_t<OA::kind>, layout_t<OB::kind>>();
  } else {
    using Bk = typename OA::backend;
    using Out = Sharded<T, layout_t<rule.result>, Bk>;
    const auto& ta = OA::tensor(a);
    const auto& tb = OB::tensor(b);
    detail::check_operand(ta.group(), "matmul");
    detail::check_operand(tb.group(), "matmul");
    const auto [m, k] = detail::global_shape(a);
    const auto [k2, n] = detail::global_shape(b);
    if (k != k2)
      throw ShapeError(detail::cat("matmul: inner dimensions do not match: ", m, "x", k, " · ", k2, "x", n));
    const Group& g = detail::result_group(ta.group(), tb.group(), "matmul");  // the ledgered handle of the two
    const int p = g.size();
    // A[a] · B[b] → C[rule.result], local: the log shows no collective under it.
    auto e = explain_op(g, "matmul", dtype_of<T>,
                        {detail::operand_note<0>(a), detail::operand_note<1>(a), detail::operand_note<2>(a), " · ",
                         detail::operand_note<0>(b), detail::operand_note<1>(b), detail::operand_note<2>(b), " → ",
                         note(m, n, rule.result)});
    return Out(detail::local_product<T, Bk>(detail::view_of(a), detail::view_of(b), rule, m, n, g.rank(), p), m, n,
               g);
  }
}

}  // namespace shardalg
