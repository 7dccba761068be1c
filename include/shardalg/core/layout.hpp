// shardalg/core/layout.hpp — the four layout tags of one mesh axis of P ranks.
//
//   layout      notation   rank r holds                 dense value
//   Replicated  A[R]       all of A                     the common copy
//   RowSharded  A[Row]     row block r (tokens)         rows stacked in rank order
//   ColSharded  A[C]       column block r (features)    columns side by side in rank order
//   Partial     A[Partial] a full-shape summand A_r     Σ_r A_r
//
// Blocks are contiguous and equal: a sharded dimension must be divisible by P.
#pragma once

#include <concepts>
#include <string_view>

namespace shardalg {

enum class LayoutKind { replicated, row, col, partial };

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

template <class L>
concept Layout = std::same_as<L, Replicated> || std::same_as<L, RowSharded> ||
                 std::same_as<L, ColSharded> || std::same_as<L, Partial>;

/// A layout that splits one dimension into P blocks.
template <class L>
concept SplitLayout = std::same_as<L, RowSharded> || std::same_as<L, ColSharded>;

constexpr std::string_view notation(LayoutKind k) {
  switch (k) {
    case LayoutKind::replicated: return "R";
    case LayoutKind::row: return "Row";
    case LayoutKind::col: return "C";
    case LayoutKind::partial: return "Partial";
  }
  return "?";
}

constexpr std::string_view name(LayoutKind k) {
  switch (k) {
    case LayoutKind::replicated: return "Replicated";
    case LayoutKind::row: return "RowSharded";
    case LayoutKind::col: return "ColSharded";
    case LayoutKind::partial: return "Partial";
  }
  return "?";
}

template <LayoutKind K> struct layout_of_kind;
template <> struct layout_of_kind<LayoutKind::replicated> { using type = Replicated; };
template <> struct layout_of_kind<LayoutKind::row> { using type = RowSharded; };
template <> struct layout_of_kind<LayoutKind::col> { using type = ColSharded; };
template <> struct layout_of_kind<LayoutKind::partial> { using type = Partial; };
template <LayoutKind K> using layout_t = typename layout_of_kind<K>::type;

/// Transposition swaps which dimension is split: Rᵀ = R, Rowᵀ = C, Cᵀ = Row, Partialᵀ = Partial.
constexpr LayoutKind transpose(LayoutKind k) {
  if (k == LayoutKind::row) return LayoutKind::col;
  if (k == LayoutKind::col) return LayoutKind::row;
  return k;
}
template <Layout L> using transpose_t = layout_t<transpose(L::kind)>;

/// Cotangent layouts (the duals): cot(Row) = Row, cot(C) = C, cot(Partial) = R, and cot(R) is
/// Partial when the replicated value fed sharded computations (each rank holds its contribution),
/// R when it fed only redundant replicated ones. `cotangent_kind` returns the first, general case.
constexpr LayoutKind cotangent(LayoutKind k) {
  if (k == LayoutKind::partial) return LayoutKind::replicated;
  if (k == LayoutKind::replicated) return LayoutKind::partial;
  return k;
}

}  // namespace shardalg
