// shardalg/base/diagnostics.hpp — the catalogue of compile-time diagnostics: every [shardalg.E1xx]
// text is written here, once per ID, and nowhere else (docs/design.md §6's table is checked
// against this file by tests/unit/test_error_catalogue.cpp).
//
// `diagnose<ID>()` is instantiated only on the invalid path of an operation (after an
// `if constexpr` that stops the cascade), so exactly one of the assertions below fires.
#pragma once

#include <tuple>
#include <type_traits>

#include "shardalg/base/layout.hpp"

namespace shardalg {


enum class Diag : int {
  // matmul  C = A · B
  matmul_row_row = 101,
  matmul_col_col = 102,
  matmul_row_col = 103,
  matmul_any_partial = 104,
  matmul_partial_split = 105,
  matmul_partial_partial = 106,
  // elementwise and row-wise
  nonlinear_partial = 110,
  bias_partial = 111,
  add_mismatch = 112,
  hadamard_partial_partial = 113,
  rowwise_col = 114,
  rowwise_partial = 115,
  bias_layout = 116,
  hadamard_mismatch = 117,
  // redistributions
  all_reduce_input = 120,
  reduce_scatter_input = 121,
  all_gather_input = 122,
  split_input = 123,
  all_to_all_input = 124,
  copy_to_input = 125,
  reduce_from_input = 126,
  to_partial_input = 127,
  // parameter updates
  update_partial_grad = 130,
  update_layout = 131,
  // element types
  dtype_mismatch = 140,
  // layouts requested of the planner, and conversions
  layout_conversion = 150,
  plan_target = 151,
  // mesh axes
  axis_group_mismatch = 160,
  not_innermost = 161,
  needs_slice = 162,
  axes_differ = 163,
  view_not_alone = 164,
  unknown_axis = 165,
  zero3_param_sharded = 166,
  // the Invariant layout
  invariant_mix = 170,
};

/// What an invalid operation returns after its diagnostic fired: an empty type, so the compiler
/// reports the one static_assert and not a cascade of follow-on errors.
struct InvalidOperation {};

/// Fires the assertion with ID D. `Dependent...` are the calling operation's template
/// parameters: they make the call dependent, so a compiler instantiates it only on the invalid
/// path of that operation (Clang instantiates a non-dependent constexpr call even inside a
/// discarded `if constexpr` branch). The deduced return type makes GCC instantiate the body
/// where the call is, so the [shardalg.E1xx] line is the first error, not a follow-on one.
/// Which of two operand layouts is Invariant: 1 the first, 2 the second, 0 neither or no pair.
template <class... Ls>
constexpr int invariant_side() {
  if constexpr (sizeof...(Ls) == 2) {
    using P = std::tuple<Ls...>;
    constexpr bool a = std::is_same_v<std::tuple_element_t<0, P>, Invariant>;
    constexpr bool b = std::is_same_v<std::tuple_element_t<1, P>, Invariant>;
    return a && !b ? 1 : (b && !a ? 2 : 0);
  } else {
    return 0;
  }
}

template <Diag D, class... Dependent>
constexpr auto diagnose() {
  constexpr int id = static_cast<int>(D);
  static_assert(id != 101,
                "[shardalg.E101] matmul(RowSharded, RowSharded): the contraction index is split in B "
                "but A is split on its rows. Fix: all_gather(B) to Replicated first (Row · R -> Row; "
                "adjoint of all_gather: reduce_scatter).");
  static_assert(id != 102,
                "[shardalg.E102] matmul(ColSharded, ColSharded): the contraction index is split in A "
                "but not in B. Fix: all_gather(A) to Replicated first (R · C -> C; adjoint of "
                "all_gather: reduce_scatter), or shard B by rows to get a Partial result.");
  static_assert(id != 103,
                "[shardalg.E103] matmul(RowSharded, ColSharded): both non-contracting dimensions are "
                "split on the same axis, so no rank holds a whole output block. Fix: all_gather one "
                "operand (A -> R gives R · C -> C; B -> R gives Row · R -> Row; adjoint of all_gather: "
                "reduce_scatter).");
  static_assert(id != 104,
                "[shardalg.E104] matmul(sharded, Partial): B is a pending sum and A is split, so the "
                "cross terms A_r · B_s are missing. Fix: all_reduce(B) to Replicated first (adjoint: "
                "identity).");
  static_assert(id != 105,
                "[shardalg.E105] matmul(Partial, sharded): A is a pending sum and B is split, so the "
                "cross terms A_s · B_r are missing. Fix: all_reduce(A) to Replicated first (adjoint: "
                "identity).");
  static_assert(id != 106,
                "[shardalg.E106] matmul(Partial, Partial): a product of sums is not a sum of products. "
                "Fix: all_reduce one operand to Replicated first (adjoint: identity).");
  static_assert(id != 110,
                "[shardalg.E110] non-linear elementwise op on Partial: f(sum of summands) is not the "
                "sum of f(summand). Fix: all_reduce to Replicated (adjoint: identity) or "
                "reduce_scatter to RowSharded (adjoint: all_gather) first.");
  static_assert(id != 111,
                "[shardalg.E111] add_bias on Partial: every rank would add the bias, so the sum holds "
                "it P times. Fix: all_reduce (adjoint: identity) or reduce_scatter (adjoint: "
                "all_gather) first, then add the bias once.");
  static_assert(id != 112,
                "[shardalg.E112] elementwise add of two different layouts: the blocks do not line up. "
                "Fix: redistribute one operand to the other's layout (split, all_gather, all_reduce or "
                "reduce_scatter; each has its adjoint).");
  static_assert(id != 113,
                "[shardalg.E113] hadamard(Partial, Partial): (sum A_r) * (sum B_s) has cross terms "
                "no rank holds. Fix: all_reduce one operand to Replicated first (adjoint: identity).");
  static_assert(id != 114,
                "[shardalg.E114] row-wise op on ColSharded: each row is split across ranks. Fix: "
                "all_gather to Replicated first (adjoint: reduce_scatter), all_to_all to RowSharded "
                "(adjoint: all_to_all), or the parallel form with partial statistics and one "
                "all_reduce.");
  static_assert(id != 115,
                "[shardalg.E115] row-wise op on Partial: the row's values are pending sums. Fix: "
                "all_reduce (adjoint: identity) or reduce_scatter (adjoint: all_gather) first.");
  static_assert(id != 116,
                "[shardalg.E116] add_bias layout: a bias b[1,K] must be ColSharded for a ColSharded "
                "activation and Replicated for a Replicated or RowSharded one. Fix: split(b) "
                "(adjoint: all_gather) or all_gather(b) (adjoint: reduce_scatter).");
  static_assert(id != 117,
                "[shardalg.E117] hadamard of two different layouts: the blocks do not line up (only "
                "Partial * Replicated mixes). Fix: redistribute one operand to the other's layout.");
  static_assert(id != 120,
                "[shardalg.E120] all_reduce needs Partial: only a Partial has a pending sum; reducing "
                "P copies of a Replicated or split value is wrong. Fix: all_gather (adjoint: "
                "reduce_scatter) for a split value; nothing for a Replicated or Invariant one (it is already whole).");
  static_assert(id != 121,
                "[shardalg.E121] reduce_scatter needs Partial. Fix: split (free; adjoint: all_gather) "
                "for a Replicated value, all_to_all (adjoint: all_to_all) for a split one.");
  static_assert(id != 122,
                "[shardalg.E122] all_gather needs RowSharded or ColSharded. Fix: all_reduce (adjoint: "
                "identity) for a Partial value; a Replicated value is already whole.");
  static_assert(id != 123,
                "[shardalg.E123] split needs Replicated. Fix: reduce_scatter (adjoint: all_gather) for "
                "a Partial value, all_to_all (adjoint: all_to_all) for a split one.");
  static_assert(id != 124,
                "[shardalg.E124] all_to_all moves RowSharded <-> ColSharded only. Fix: split "
                "(adjoint: all_gather) from Replicated, reduce_scatter (adjoint: all_gather) from "
                "Partial.");
  static_assert(id != 125,
                "[shardalg.E125] copy_to (Megatron's f) takes an Invariant (or Replicated) input: identity "
                "forward, all_reduce of the Partial cotangent backward. Fix: all_gather (adjoint: "
                "reduce_scatter) or all_reduce (adjoint: identity) first.");
  static_assert(id != 126,
                "[shardalg.E126] reduce_from (Megatron's g) takes a Partial input: all_reduce forward, "
                "identity backward. A non-Partial value has nothing to reduce.");
  static_assert(id != 127,
                "[shardalg.E127] to_partial needs Replicated, RowSharded or ColSharded: a Partial is "
                "already a sum of summands. Fix: nothing to do, or all_reduce / reduce_scatter it.");
  static_assert(id != 130,
                "[shardalg.E130] parameter update with a gradient that is still Partial (on the tensor-parallel "
                "group, or on a mesh axis: on dp each replica holds only its batch's contribution): the "
                "parameter is replicated and its gradient holds per-rank summands, so the ranks would diverge. "
                "Fix: all_reduce the gradient first (adjoint of the replicated use; Megatron's "
                "sequence-parallel norm-weight reduction; all_reduce<dp>(grad) on a mesh), or the sharded "
                "optimizer (reduce-scatter on dp).");
  static_assert(id != 131,
                "[shardalg.E131] parameter update: the gradient's layout differs from the parameter's. "
                "Fix: redistribute the gradient to the parameter's layout (split, all_gather, "
                "all_reduce or reduce_scatter).");
  static_assert(id != 140,
                "[shardalg.E140] operands have different element types. Fix: convert one with cast<U>(x) "
                "(shardalg/core/cast.hpp; same layout, no communication).");
  static_assert(id != 151,
                "[shardalg.E151] matmul<To> / redistribute<To>: To must be a layout the planner reaches "
                "(Replicated, RowSharded, ColSharded or Partial). Invariant is reached only by its named "
                "conversions: all_reduce<Invariant> (Megatron's g) or all_gather<Invariant>.");
  static_assert(id != 160,
                "[shardalg.E160] a group of one mesh axis passed where another axis's group is expected "
                "(e.g. the pipeline group for the tensor-parallel one): its collectives would run over "
                "the wrong ranks. Fix: take mesh.axis<A>() for the axis the callee names.");
  static_assert(id != 161,
                "[shardalg.E161] this collective runs on an axis whose split of the dimension is not the "
                "innermost: another axis later in the tensor's axis list splits the same dimension, so the "
                "blocks of this axis are interleaved with its blocks (the wrong full_tensor of TP+FSDP). "
                "Fix: gather (all_gather) the inner axis first, or order the axes so this one is innermost.");
  static_assert(id != 162,
                "[shardalg.E162] mesh matmul: on some axis the one-axis rule is R · Row or C · R, a free slice "
                "of the replicated operand, which the mesh product does not take implicitly. Fix: "
                "split<axis, layout>(x) the replicated operand on that axis first (free), so the rule is C · Row.");
  static_assert(id != 163,
                "[shardalg.E163] the operands live on different mesh axes, or on the same axes in another "
                "order (the order is the nesting of splits of one dimension). Fix: build both with the same "
                "Axes<On<...>...> list.");
  static_assert(id != 164,
                "[shardalg.E164] view<A>(x): every other axis must be Replicated (or Invariant) for x to be one "
                "tensor on axis A's group. Fix: all_gather / all_reduce the other axes first.");
  static_assert(id != 165,
                "[shardalg.E165] the tensor does not live on this mesh axis (it is not in its Axes<On<...>> "
                "list). Fix: name one of its axes, or stack<Axis, Layout>(group, x) to add it.");
  static_assert(id != 166,
                "[shardalg.E166] a fully sharded (ZeRO-3) parameter used while still sharded on dp: "
                "W[tp:L, dp:Row] holds only this rank's rows of its tensor-parallel block, so a layer, a matmul "
                "or view<tp> would compute with 1/D of the weight. Fix: unshard(w) just before the use "
                "(all_gather<dp> to W[tp:L, dp:R], then view<tp>; adjoint: reduce_scatter<dp>, which "
                "reduce_scatter_grad(w, dw) does for its gradient), and drop the gathered copy after the use.");
  // E170 names the side that is I when the operation has two operands (their layouts first in
  // Dependent...), and the other fix when that side's partner came from all_reduce (R).
  constexpr int side = invariant_side<Dependent...>();
  static_assert(id != 170 || side != 1,
                "[shardalg.E170] the left operand is Invariant (I) and the right one is not: I is the same value on "
                "every rank with a whole gradient on every rank (cot(I) = I), R or a split layout has a per-rank "
                "gradient, so the op has no typed backward. Fix: if the right operand is an R made by all_reduce, "
                "write all_reduce<Invariant>(z) (Megatron's g: backward identity) so both are I and the backward "
                "keeps one all-reduce; else convert the left operand with copy_to(x) (Megatron's f: I -> R, "
                "backward all_reduce Partial -> I).");
  static_assert(id != 170 || side != 2,
                "[shardalg.E170] the right operand is Invariant (I) and the left one is not: I is the same value on "
                "every rank with a whole gradient on every rank (cot(I) = I), R or a split layout has a per-rank "
                "gradient, so the op has no typed backward. Fix: if the left operand is an R made by all_reduce, "
                "write all_reduce<Invariant>(z) (Megatron's g: backward identity) so both are I and the backward "
                "keeps one all-reduce; else convert the right operand with copy_to(x) (Megatron's f: I -> R, "
                "backward all_reduce Partial -> I).");
  static_assert(id != 170 || side != 0,
                "[shardalg.E170] an Invariant (I) operand mixed with another layout, or I asked of a value "
                "that is not I (a sum<Invariant> of an R value; a norm whose weights are not in the stream's "
                "world: I for X[I], R for X[R] and X[Row]): I is the same value on every rank with a whole "
                "gradient on every rank (cot(I) = I), R or a split layout has a per-rank gradient, so the op "
                "has no typed backward. Fix: convert the I operand with copy_to(x) (Megatron's f: I -> R, "
                "backward all_reduce Partial -> I), or produce it with all_reduce<Replicated> instead of "
                "all_reduce<Invariant> (g); I is entered only by all_reduce<Invariant> or all_gather<Invariant>.");
  return InvalidOperation{};
}

/// `require<D, ok, Dependent...>()`: the assertion D fires when `ok` is false (for a check inside a
/// function whose return type is fixed, so that it cannot return InvalidOperation).
template <Diag D, bool Ok, class... Dependent>
constexpr void require() {
  if constexpr (!Ok) (void)diagnose<D, Dependent...>();
}

/// [shardalg.E150] A Sharded of one layout used where another layout is expected (an
/// assignment, an argument, a return). Changing a layout is a collective, and shardalg never
/// inserts one silently: the message names the collective for the pair, and the planned forms.
template <LayoutKind From, LayoutKind To>
constexpr auto diagnose_conversion() {
  using K = LayoutKind;
  static_assert(!(From == K::partial && To == K::replicated),
                "[shardalg.E150] a Partial tensor where a Replicated one is expected: the summands are "
                "not reduced. Fix: all_reduce(x) (adjoint: identity), or ask for it: "
                "redistribute<Replicated>(x), matmul<Replicated>(a, b).");
  static_assert(!(From == K::partial && (To == K::row || To == K::col)),
                "[shardalg.E150] a Partial tensor where a RowSharded/ColSharded one is expected: the "
                "summands are not reduced. Fix: reduce_scatter<RowSharded or ColSharded>(x) (adjoint: "
                "all_gather), or ask for it: redistribute<To>(x), matmul<To>(a, b).");
  static_assert(!((From == K::row || From == K::col) && To == K::replicated),
                "[shardalg.E150] a sharded tensor where a Replicated one is expected: each rank holds "
                "one block. Fix: all_gather(x) (adjoint: reduce_scatter), or ask for it: "
                "redistribute<Replicated>(x), matmul<Replicated>(a, b).");
  static_assert(!(From == K::replicated && (To == K::row || To == K::col)),
                "[shardalg.E150] a Replicated tensor where a RowSharded/ColSharded one is expected. Fix: "
                "split<RowSharded or ColSharded>(x) (free; adjoint: all_gather), or redistribute<To>(x).");
  static_assert(!((From == K::row && To == K::col) || (From == K::col && To == K::row)),
                "[shardalg.E150] a RowSharded tensor where a ColSharded one is expected, or the reverse. "
                "Fix: all_to_all<To>(x) (adjoint: all_to_all back), or redistribute<To>(x).");
  static_assert(!(From == K::invariant && To != K::partial),
                "[shardalg.E150] an Invariant (I) tensor where another layout is expected. Fix: copy_to(x) "
                "(Megatron's f: I -> R, backward all_reduce), then split / redistribute from R.");
  static_assert(!(To == K::invariant && From != K::partial),
                "[shardalg.E150] a tensor where an Invariant (I) one is expected: only a reduction makes "
                "every rank's gradient whole. Fix: all_reduce<Invariant>(x) from a Partial (Megatron's g), "
                "or all_gather<Invariant>(x) from a split one.");
  static_assert(!(From == K::partial && To == K::invariant),
                "[shardalg.E150] a Partial tensor where an Invariant (I) one is expected: the summands are not "
                "reduced. Fix: all_reduce<Invariant>(x) (Megatron's g: backward identity I -> R).");
  static_assert(To != K::partial,
                "[shardalg.E150] a tensor where a Partial one is expected. Fix: to_partial(x) (free), or "
                "redistribute<Partial>(x).");
  return InvalidOperation{};
}

}  // namespace shardalg
