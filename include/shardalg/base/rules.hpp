// shardalg/base/rules.hpp — the layout algebra as constexpr data: one table for matmul, small
// functions for elementwise and row-wise operations. The operations read these; the tests
// iterate over them; docs/design.md prints them.
//
// Matmul C[I,K] = A[I,J] · B[J,K]  (row: A's layout, column: B's layout)
//
//   A \ B    | R                     | Row (J split)          | C (K split) | Partial
//   ---------+-----------------------+------------------------+-------------+---------
//   R        | R                     | Partial, slice A[:,J_r] | C           | Partial
//   Row      | Row                   | E101                   | E103        | E104
//   C        | Partial, slice B[J_r,:]| Partial               | E102        | E104
//   Partial  | Partial               | E105                   | E105        | E106
//
//   I · I → I; I with any other layout: E170 (convert with f = copy_to, I → R, first).
//
// Every valid entry is local (no communication). A Partial result is finished by all_reduce
// (→ R) or reduce_scatter (→ Row or C): the collective the type tells you to call.
#pragma once

#include "shardalg/base/diagnostics.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/layout.hpp"

namespace shardalg {

/// How the local GEMM reads its operands for a valid matmul rule.
enum class LocalForm {
  direct,        // C_r = A_r · B_r
  slice_a_cols,  // R · Row: C_r = A[:, J_r] · B_r   (a free slice of the replicated A)
  slice_b_rows,  // C · R:   C_r = A_r · B[J_r, :]   (a free slice of the replicated B)
};

struct MatmulRule {
  bool valid;
  LayoutKind result;
  LocalForm form;
  Diag error;  // meaningful when !valid
};

constexpr MatmulRule matmul_rule(LayoutKind a, LayoutKind b) {
  using K = LayoutKind;
  constexpr auto ok = [](K r, LocalForm f = LocalForm::direct) { return MatmulRule{true, r, f, Diag{}}; };
  constexpr auto bad = [](Diag d) { return MatmulRule{false, K::replicated, LocalForm::direct, d}; };
  // I is a closed world: I · I → I (every rank repeats the product), anything else needs f.
  if (a == K::invariant || b == K::invariant)
    return a == b ? ok(K::invariant) : bad(Diag::invariant_mix);
  switch (a) {
    case K::replicated:
      switch (b) {
        case K::replicated: return ok(K::replicated);
        case K::row: return ok(K::partial, LocalForm::slice_a_cols);
        case K::col: return ok(K::col);
        case K::partial: return ok(K::partial);
        case K::invariant: break;
      }
      break;
    case K::row:
      switch (b) {
        case K::replicated: return ok(K::row);
        case K::row: return bad(Diag::matmul_row_row);
        case K::col: return bad(Diag::matmul_row_col);
        case K::partial: return bad(Diag::matmul_any_partial);
        case K::invariant: break;
      }
      break;
    case K::col:
      switch (b) {
        case K::replicated: return ok(K::partial, LocalForm::slice_b_rows);
        case K::row: return ok(K::partial);
        case K::col: return bad(Diag::matmul_col_col);
        case K::partial: return bad(Diag::matmul_any_partial);
        case K::invariant: break;
      }
      break;
    case K::partial:
      switch (b) {
        case K::replicated: return ok(K::partial);
        case K::row: return bad(Diag::matmul_partial_split);
        case K::col: return bad(Diag::matmul_partial_split);
        case K::partial: return bad(Diag::matmul_partial_partial);
        case K::invariant: break;
      }
      break;
    case K::invariant: break;
  }
  return bad(Diag::matmul_partial_partial);
}

/// Elementwise and row-wise rules: the result layout of a valid operation, or the Diag.
struct UnaryRule {
  bool valid;
  LayoutKind result;
  Diag error;
};

namespace rules {
using K = LayoutKind;

/// Exactly one operand is I: the op mixes the invariant world with another (E170).
constexpr bool mixes_invariant(K a, K b) { return (a == K::invariant) != (b == K::invariant); }

/// A + B, A − B: the same layout on both sides (linear: Partial + Partial is fine).
constexpr UnaryRule add(K a, K b) {
  if (mixes_invariant(a, b)) return {false, a, Diag::invariant_mix};
  return a == b ? UnaryRule{true, a, {}} : UnaryRule{false, a, Diag::add_mismatch};
}
/// α · A: every layout (linear).
constexpr UnaryRule scale(K a) { return {true, a, {}}; }
/// f(A) for a non-linear f: not on Partial.
constexpr UnaryRule nonlinear(K a) {
  return a == K::partial ? UnaryRule{false, a, Diag::nonlinear_partial} : UnaryRule{true, a, {}};
}
/// A ⊙ B: the same layout, or Partial with Replicated (linear in the Partial operand).
constexpr UnaryRule hadamard(K a, K b) {
  if (mixes_invariant(a, b)) return {false, a, Diag::invariant_mix};
  if (a == K::partial && b == K::partial) return {false, a, Diag::hadamard_partial_partial};
  if (a == b) return {true, a, {}};
  if ((a == K::partial && b == K::replicated) || (a == K::replicated && b == K::partial))
    return {true, K::partial, {}};
  return {false, a, Diag::hadamard_mismatch};
}
/// X + b broadcast over rows, b[1,K]: b R for X R or Row; b C for X C; b I for X I; never on
/// Partial.
constexpr UnaryRule bias(K x, K b) {
  if (x == K::partial) return {false, x, Diag::bias_partial};
  if (mixes_invariant(x, b)) return {false, x, Diag::invariant_mix};
  const K want = x == K::col ? K::col : x == K::invariant ? K::invariant : K::replicated;
  return b == want ? UnaryRule{true, x, {}} : UnaryRule{false, x, Diag::bias_layout};
}
/// Row-wise (softmax over K, LayerNorm, row max): each rank must hold whole rows.
constexpr UnaryRule rowwise(K a) {
  if (a == K::col) return {false, a, Diag::rowwise_col};
  if (a == K::partial) return {false, a, Diag::rowwise_partial};
  return {true, a, {}};
}
/// Σ_i A[i,:] → [1,K] (bias and norm-weight gradients): Row leaves a Partial.
constexpr UnaryRule col_sum(K a) {
  if (a == K::row) return {true, K::partial, {}};
  return {true, a, {}};
}
/// Σ_k A[:,k] → [I,1] (partial statistics of a parallel LayerNorm): C leaves a Partial.
constexpr UnaryRule row_sum(K a) {
  if (a == K::col) return {true, K::partial, {}};
  return {true, a, {}};
}
}  // namespace rules

}  // namespace shardalg
