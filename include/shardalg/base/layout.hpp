// shardalg/base/layout.hpp — the five layout tags of one mesh axis of P ranks.
//
//   layout      notation   rank r holds                 dense value       cotangent
//   Replicated  A[R]       all of A                     the common copy   Partial
//   Invariant   A[I]       all of A                     the common copy   I
//   RowSharded  A[Row]     row block r (tokens)         rows stacked      Row
//   ColSharded  A[C]       column block r (features)    columns side by side  C
//   Partial     A[Partial] a full-shape summand A_r     Σ_r A_r           R
//
// R and I hold the same values; they differ in what their gradient is. An R value feeds work
// that differs by rank (a sharded matmul), so each rank's use contributes one summand of its
// gradient: cot(R) = Partial. An I value feeds only work every rank repeats (Megatron's residual
// stream, a parameter updated redundantly), so every rank computes the whole gradient:
// cot(I) = I. I mixes with no other layout without a named conversion (E170): Megatron's
// f = copy_to (I → R; backward all_reduce Partial → I) and g = all_reduce<Invariant>
// (Partial → I; backward identity I → R).
//
// Blocks are contiguous and equal: a sharded dimension must be divisible by P.
#pragma once

#include <concepts>
#include <string_view>

namespace shardalg {

enum class LayoutKind { replicated, row, col, partial, invariant };

struct Replicated {
  static constexpr LayoutKind kind = LayoutKind::replicated;
  static constexpr std::string_view notation = "R";
  static constexpr std::string_view name = "Replicated";
};
struct RowSharded {
  static constexpr LayoutKind kind = LayoutKind::row;
  static constexpr std::string_view notation = "Row";
  static constexpr std::string_view name = "RowSharded";
};
struct ColSharded {
  static constexpr LayoutKind kind = LayoutKind::col;
  static constexpr std::string_view notation = "C";
  static constexpr std::string_view name = "ColSharded";
};
struct Partial {
  static constexpr LayoutKind kind = LayoutKind::partial;
  static constexpr std::string_view notation = "Partial";
  static constexpr std::string_view name = "Partial";
};
struct Invariant {
  static constexpr LayoutKind kind = LayoutKind::invariant;
  static constexpr std::string_view notation = "I";
  static constexpr std::string_view name = "Invariant";
};

template <class L>
concept Layout = std::same_as<L, Replicated> || std::same_as<L, RowSharded> ||
                 std::same_as<L, ColSharded> || std::same_as<L, Partial> || std::same_as<L, Invariant>;

/// A layout in which every rank holds the whole matrix: R or I.
template <class L>
concept WholeLayout = std::same_as<L, Replicated> || std::same_as<L, Invariant>;

/// A layout that splits one dimension into P blocks.
template <class L>
concept SplitLayout = std::same_as<L, RowSharded> || std::same_as<L, ColSharded>;

constexpr std::string_view notation(LayoutKind k) {
  switch (k) {
    case LayoutKind::replicated: return "R";
    case LayoutKind::row: return "Row";
    case LayoutKind::col: return "C";
    case LayoutKind::partial: return "Partial";
    case LayoutKind::invariant: return "I";
  }
  return "?";
}

constexpr std::string_view name(LayoutKind k) {
  switch (k) {
    case LayoutKind::replicated: return "Replicated";
    case LayoutKind::row: return "RowSharded";
    case LayoutKind::col: return "ColSharded";
    case LayoutKind::partial: return "Partial";
    case LayoutKind::invariant: return "Invariant";
  }
  return "?";
}

/// Whether every rank holds the whole matrix (R or I).
constexpr bool whole(LayoutKind k) { return k == LayoutKind::replicated || k == LayoutKind::invariant; }

template <LayoutKind K> struct layout_of_kind;
template <> struct layout_of_kind<LayoutKind::replicated> { using type = Replicated; };
template <> struct layout_of_kind<LayoutKind::row> { using type = RowSharded; };
template <> struct layout_of_kind<LayoutKind::col> { using type = ColSharded; };
template <> struct layout_of_kind<LayoutKind::partial> { using type = Partial; };
template <> struct layout_of_kind<LayoutKind::invariant> { using type = Invariant; };
template <LayoutKind K> using layout_t = typename layout_of_kind<K>::type;

/// Transposition swaps which dimension is split: Rᵀ = R, Iᵀ = I, Rowᵀ = C, Cᵀ = Row, Partialᵀ = Partial.
constexpr LayoutKind transpose(LayoutKind k) {
  if (k == LayoutKind::row) return LayoutKind::col;
  if (k == LayoutKind::col) return LayoutKind::row;
  return k;
}
template <Layout L> using transpose_t = layout_t<transpose(L::kind)>;

/// Cotangent layouts (the duals): cot(R) = Partial, cot(I) = I, cot(Partial) = R, cot(Row) = Row,
/// cot(C) = C. cot is an involution on {R, Partial} and the identity on the others.
constexpr LayoutKind cotangent(LayoutKind k) {
  if (k == LayoutKind::partial) return LayoutKind::replicated;
  if (k == LayoutKind::replicated) return LayoutKind::partial;
  return k;
}

}  // namespace shardalg
