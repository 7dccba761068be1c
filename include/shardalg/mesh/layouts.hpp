// shardalg/mesh/layouts.hpp — one layout per mesh axis, in the type.
//
//   Axes<On<dp, RowSharded>, On<tp, ColSharded>>     X[dp:Row, tp:C]
//
// The list is outermost first. When two axes split the same dimension, the order is the nesting:
// with X[dp:Row, tp:Row] on dp × tp = 2 × 2 the rows fall into 4 blocks, and rank (d, t) holds
// block d·2 + t (dp outer, tp inner); X[tp:Row, dp:Row] is another type, holding block t·2 + d.
// A collective that splits or gathers a dimension must act on its innermost split (E161).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "shardalg/base/layout.hpp"
#include "shardalg/mesh/axis.hpp"

namespace shardalg {

/// Layout L on mesh axis A.
template <MeshAxis A, Layout L>
struct On {
  using axis = A;
  using layout = L;
};

/// The per-axis layouts of a tensor, outermost axis first.
template <class... Os>
struct Axes {
  static constexpr std::size_t size = sizeof...(Os);
  static constexpr std::array<LayoutKind, sizeof...(Os)> kinds{Os::layout::kind...};
  static constexpr std::array<std::string_view, sizeof...(Os)> names{Os::axis::name...};
};

template <class X>
struct is_axes : std::false_type {};
template <MeshAxis... A, Layout... L>
struct is_axes<Axes<On<A, L>...>> : std::true_type {};
template <class X>
concept AxesList = is_axes<X>::value;

namespace mesh_detail {
inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

/// Index of axis A in the list, npos when absent.
template <MeshAxis A, class Ax>
struct index_of;
template <MeshAxis A, class... Os>
struct index_of<A, Axes<Os...>> {
  static constexpr std::size_t value = [] {
    constexpr bool hit[] = {std::is_same_v<A, typename Os::axis>..., false};
    for (std::size_t i = 0; i < sizeof...(Os); ++i)
      if (hit[i]) return i;
    return npos;
  }();
};

/// The list with axis A's layout replaced by L.
template <MeshAxis A, Layout L, class Ax>
struct replace;
template <MeshAxis A, Layout L, class... Os>
struct replace<A, L, Axes<Os...>> {
  using type = Axes<std::conditional_t<std::is_same_v<A, typename Os::axis>, On<A, L>, Os>...>;
};

/// Which dimension a layout splits: 0 rows, 1 columns, −1 none.
constexpr int split_dim(LayoutKind k) {
  return k == LayoutKind::row ? 0 : k == LayoutKind::col ? 1 : -1;
}

/// Whether an axis after index i splits dimension `dim` (so a split of `dim` at i is not innermost).
template <class Ax>
constexpr bool split_after(std::size_t i, int dim) {
  for (std::size_t j = i + 1; j < Ax::size; ++j)
    if (split_dim(Ax::kinds[j]) == dim) return true;
  return false;
}

/// Whether two lists name the same axes in the same order.
template <class X, class Y>
constexpr bool same_axes() {
  if constexpr (X::size != Y::size) {
    return false;
  } else {
    for (std::size_t i = 0; i < X::size; ++i)
      if (X::names[i] != Y::names[i]) return false;
    return true;
  }
}
}  // namespace mesh_detail

template <MeshAxis A, class Ax>
inline constexpr std::size_t axis_index_v = mesh_detail::index_of<A, Ax>::value;
template <MeshAxis A, Layout L, class Ax>
using replace_layout_t = typename mesh_detail::replace<A, L, Ax>::type;

/// "dp:Row, tp:C".
template <AxesList Ax>
std::string axes_notation() {
  std::string s;
  for (std::size_t i = 0; i < Ax::size; ++i) {
    if (i) s += ", ";
    s += std::string(Ax::names[i]) + ":" + std::string(notation(Ax::kinds[i]));
  }
  return s;
}

}  // namespace shardalg
