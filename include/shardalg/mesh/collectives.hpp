// shardalg/mesh/collectives.hpp — the redistributions of §5 on one named axis of a MeshSharded.
// Each runs the one-axis collective over that axis's group, on the block the axis sees (the
// other axes' share), so the ledger records it with the one-axis layouts and the axis's name:
//
//   all_reduce<dp>(G[dp:Partial, tp:C])          → G[dp:R, tp:C]       all_reduce over dp
//   all_reduce<tp, Invariant>(Z[dp:Row, tp:Partial]) → Z[dp:Row, tp:I] g over tp
//   copy_to<tp>(X[dp:Row, tp:I])                 → X[dp:Row, tp:R]     f over tp (free)
//   all_gather<tp>(X[dp:Row, tp:Row])            → X[dp:Row, tp:R]     all_gather over tp
//   reduce_scatter<dp, RowSharded>(G[dp:Partial]) → G[dp:Row]           reduce_scatter over dp
//   split<tp, ColSharded>(W[dp:R, tp:R])         → W[dp:R, tp:C]       free (from I too)
//
// A split or gather must act on the innermost split of its dimension (E161): gathering dp out of
// X[dp:Row, tp:Row] would interleave tp's blocks (PyTorch's wrong full_tensor under TP + FSDP).
// The one-axis diagnostics (E120–E123) name the layout a collective needs.
#pragma once

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/mesh/sharded.hpp"

namespace shardalg {

namespace mesh_detail {
/// The result on the same groups with axis A's layout replaced by L.
template <MeshAxis A, Layout L, class T, class Ax, class B>
MeshSharded<T, replace_layout_t<A, L, Ax>, B> rewrap(typename B::template matrix<T> local,
                                                     const MeshSharded<T, Ax, B>& like) {
  return {std::move(local), like.rows(), like.cols(), like.groups()};
}
}  // namespace mesh_detail

/// Partial on A → To (R, or I: Megatron's g) on A: one all_reduce over A's group.
template <MeshAxis A, WholeLayout To = Replicated, class T, class Ax, class B>
auto all_reduce(const MeshSharded<T, Ax, B>& x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else if constexpr (Ax::kinds[i] != LayoutKind::partial) {
    return diagnose<Diag::all_reduce_input, layout_t<Ax::kinds[i]>>();
  } else {
    Sharded<T, Partial, B> v(x.local(), x.local_rows(), x.local_cols(), x.groups()[i]);
    return mesh_detail::rewrap<A, To>(all_reduce<To>(std::move(v)).local(), x);
  }
}

/// I on A → R on A: Megatron's f on one axis (free forward; backward all_reduce over A).
template <MeshAxis A, class T, class Ax, class B>
auto copy_to(const MeshSharded<T, Ax, B>& x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else if constexpr (Ax::kinds[i] != LayoutKind::invariant) {
    return diagnose<Diag::copy_to_input, layout_t<Ax::kinds[i]>>();
  } else {
    return mesh_detail::rewrap<A, Replicated>(x.local(), x);
  }
}

/// Row or C on A → To (R or I) on A: one all_gather over A's group; A must be the innermost split
/// (E161).
template <MeshAxis A, WholeLayout To = Replicated, class T, class Ax, class B>
auto all_gather(const MeshSharded<T, Ax, B>& x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else {
    constexpr LayoutKind k = Ax::kinds[i];
    if constexpr (k != LayoutKind::row && k != LayoutKind::col) {
      return diagnose<Diag::all_gather_input, layout_t<k>>();
    } else if constexpr (mesh_detail::split_after<Ax>(i, mesh_detail::split_dim(k))) {
      return diagnose<Diag::not_innermost, A>();
    } else {
      // A is the innermost split of its dimension: it splits the block the outer axes leave.
      const Index r = k == LayoutKind::row ? x.nested_block(0, i).size : x.local_rows();
      const Index c = k == LayoutKind::col ? x.nested_block(1, i).size : x.local_cols();
      Sharded<T, layout_t<k>, B> v(x.local(), r, c, x.groups()[i]);
      return mesh_detail::rewrap<A, To>(all_gather<To>(v).local(), x);
    }
  }
}

/// Partial on A → To (Row or C) on A: one reduce_scatter over A's group; the new split becomes the
/// innermost of its dimension, so no later axis may split it (E161).
template <MeshAxis A, SplitLayout To, class T, class Ax, class B>
auto reduce_scatter(const MeshSharded<T, Ax, B>& x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else if constexpr (Ax::kinds[i] != LayoutKind::partial) {
    return diagnose<Diag::reduce_scatter_input, layout_t<Ax::kinds[i]>>();
  } else if constexpr (mesh_detail::split_after<Ax>(i, mesh_detail::split_dim(To::kind))) {
    return diagnose<Diag::not_innermost, A>();
  } else {
    Sharded<T, Partial, B> v(x.local(), x.local_rows(), x.local_cols(), x.groups()[i]);
    return mesh_detail::rewrap<A, To>(reduce_scatter<To>(v).local(), x);
  }
}

/// R or I on A → To (Row or C) on A: free (each rank keeps its block); innermost, as reduce_scatter.
template <MeshAxis A, SplitLayout To, class T, class Ax, class B>
auto split(const MeshSharded<T, Ax, B>& x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else if constexpr (!whole(Ax::kinds[i])) {
    return diagnose<Diag::split_input, layout_t<Ax::kinds[i]>>();
  } else if constexpr (mesh_detail::split_after<Ax>(i, mesh_detail::split_dim(To::kind))) {
    return diagnose<Diag::not_innermost, A>();
  } else {
    Sharded<T, layout_t<Ax::kinds[i]>, B> v(x.local(), x.local_rows(), x.local_cols(), x.groups()[i]);
    return mesh_detail::rewrap<A, To>(split<To>(v).local(), x);
  }
}

}  // namespace shardalg
