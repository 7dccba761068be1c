// shardalg/core/errors.hpp — the two kinds of error shardalg reports.
//
// 1. Layout mistakes are compile errors. Each one is a static_assert with a stable ID
//    ([shardalg.E1xx]) whose text names the collective that fixes it and that collective's
//    adjoint. All texts live here, in one catalog, so the IDs stay stable and greppable.
// 2. Bad values (shapes, divisibility, groups) are typed exceptions whose message names the
//    values. Nothing is modified before the check: a throwing call loses no data.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "shardalg/core/layout.hpp"

namespace shardalg {

// ---------------------------------------------------------------------------------------------
// Runtime errors
// ---------------------------------------------------------------------------------------------

/// Base of every exception shardalg throws.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Shapes that do not chain (matmul inner dimensions, elementwise operands, bias length).
struct ShapeError : Error {
  using Error::Error;
};
/// An index (a token id, a target class) outside the range it indexes.
struct IndexError : ShapeError {
  using ShapeError::ShapeError;
};
/// A dimension that must be split into equal blocks is not divisible by the group size.
struct DivisibilityError : Error {
  using Error::Error;
};
/// Operands that live on different communicator groups.
struct GroupMismatchError : Error {
  using Error::Error;
};
/// A sharded tensor, or a local block, handed to a communicator of another size.
struct GroupSizeError : Error {
  using Error::Error;
};
/// An operation on an empty tensor or handle: a default-constructed Sharded or Group (no
/// communicator). The message names the operation.
struct EmptyTensorError : Error {
  using Error::Error;
};
/// A communicator backend reported a failure (MPI error string, thread-world misuse).
struct CommError : Error {
  using Error::Error;
};
/// A collective given up because another rank failed (ThreadComm's world was aborted): a
/// bystander's error. run_ranks rethrows the failing rank's own exception in preference to it.
struct CommAbortedError : CommError {
  using CommError::CommError;
};
/// Checked mode (core/checks.hpp): the ranks of a group called different collectives (kind,
/// dtype, count, root, layouts or sequence number differ). Raised on every rank, before any data
/// moves; the message names both sides.
struct CollectiveMismatchError : CommError {
  using CommError::CommError;
};
/// Checked mode's watchdog: a rank waited longer than collective_timeout() in a collective; the
/// message names what this rank is in and what the others are in (or that they did not arrive).
struct CollectiveTimeoutError : CommError {
  using CommError::CommError;
};
/// run_ranks could not start a rank's thread (std::thread threw): the message names the rank.
struct ThreadStartError : CommError {
  using CommError::CommError;
};
/// A rank number outside its group (a source rank of distribute, a root): the message names it
/// and the group size.
struct RankError : Error {
  using Error::Error;
};
/// A Replicated tensor whose ranks hold different values (found by the replica check of
/// shard<Replicated>, core/checks.hpp): the message names the shape and the first rank that
/// differs from rank 0.
struct ReplicaMismatchError : Error {
  using Error::Error;
};

/// A NaN or an infinity where the check for finite values was asked for (nn::Gpt's
/// check_finite): the message names the first layer and the first rank that produced one.
struct NonFiniteError : Error {
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Compile-time diagnostics: the catalog
// ---------------------------------------------------------------------------------------------
//
// `diagnose<ID>()` is instantiated only on the invalid path of an operation (after an
// `if constexpr` that stops the cascade), so exactly one of the assertions below fires.

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
                "[shardalg.E130] parameter update with a Partial gradient: the parameter is replicated "
                "and its gradient still holds per-rank summands, so the ranks would diverge. Fix: "
                "all_reduce the gradient first (adjoint of the replicated use; Megatron's "
                "sequence-parallel norm-weight reduction).");
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
  static_assert(id != 170,
                "[shardalg.E170] an Invariant (I) operand mixed with another layout: I is the same value "
                "on every rank with a whole gradient on every rank (cot(I) = I), R or a split layout has a "
                "per-rank gradient, so the op has no typed backward. Fix: convert the I operand with "
                "copy_to(x) (Megatron's f: I -> R, backward all_reduce Partial -> I), or produce it with "
                "all_reduce<Replicated> instead of all_reduce<Invariant> (g).");
  return InvalidOperation{};
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
