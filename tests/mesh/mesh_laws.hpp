// The laws of MeshSharded, axis by axis, run on threads (test_mesh_laws.cpp) and under mpirun
// (test_mesh_mpi.cpp): every layout combination gathers back to its dense value; every
// redistribution on every axis leaves the dense value unchanged and is ledgered once, naming its
// axis; the product is the dense product for every combination of direct rules.
//
// The dense value is assembled here independently of the library: each world rank's block is a
// seeded integer matrix that depends only on its coordinates on the axes that are not whole (R, I),
// and is placed at the nested block index (outer axes first) or added in (Partial axes).
// Integer values (int64) make every comparison bit-exact.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <shardalg/shardalg.hpp>

#include "mesh_cases.hpp"
#include "testing.hpp"

namespace mesh_laws {

using namespace shardalg;
using V = std::int64_t;
using Mat = CpuBackend::matrix<V>;
using K = LayoutKind;

using Five = std::tuple<Replicated, Invariant, RowSharded, ColSharded, Partial>;

/// The world's axis sizes, in mesh order, for the axis names of a list.
template <class Ax>
std::vector<int> sizes_of(const Mesh& mesh) {
  std::vector<int> s;
  for (std::size_t i = 0; i < Ax::size; ++i) s.push_back(mesh.size(Ax::names[i]));
  return s;
}

/// Global shape of a tensor whose block is base_r × base_c.
template <class Ax>
std::pair<Index, Index> global_shape(const std::vector<int>& sizes, Index base_r, Index base_c) {
  Index r = base_r, c = base_c;
  for (std::size_t i = 0; i < Ax::size; ++i) {
    if (Ax::kinds[i] == K::row) r *= sizes[i];
    if (Ax::kinds[i] == K::col) c *= sizes[i];
  }
  return {r, c};
}

/// The block of the rank at coordinates `c` (in the tensor's axis order): a function of the
/// coordinates on the axes that are not whole, so R and I copies agree.
template <class Ax>
Mat block_at(const std::vector<int>& c, Index br, Index bc, std::uint64_t seed) {
  std::uint64_t key = seed;
  for (std::size_t i = 0; i < Ax::size; ++i) key = key * 131 + (whole(Ax::kinds[i]) ? 0 : static_cast<std::uint64_t>(c[i]) + 1);
  return testing::random_int<V>(br, bc, key);
}

/// The dense value, assembled from every coordinate tuple's block: row block index = nested
/// index over the Row axes (outer first), column block likewise over C; Partial axes add.
template <class Ax>
Mat dense_of(const std::vector<int>& sizes, Index br, Index bc, std::uint64_t seed) {
  const auto [rows, cols] = global_shape<Ax>(sizes, br, bc);
  Mat d = Mat::Zero(rows, cols);
  int n = 1;
  for (int s : sizes) n *= s;
  for (int w = 0; w < n; ++w) {
    const auto c = mesh_cases::coords_of(w, sizes);
    bool first_copy = true;  // count each distinct block once: whole axes at coordinate 0
    Index ri = 0, ci = 0;
    for (std::size_t i = 0; i < Ax::size; ++i) {
      if (whole(Ax::kinds[i]) && c[i] != 0) first_copy = false;
      if (Ax::kinds[i] == K::row) ri = ri * sizes[i] + c[i];
      if (Ax::kinds[i] == K::col) ci = ci * sizes[i] + c[i];
    }
    if (!first_copy) continue;
    d.block(ri * br, ci * bc, br, bc) += block_at<Ax>(c, br, bc, seed);
  }
  return d;
}

/// This rank's coordinates in the tensor's axis order.
template <class Ax>
std::vector<int> my_coords(const Mesh& mesh) {
  std::vector<int> c;
  for (std::size_t i = 0; i < Ax::size; ++i) c.push_back(mesh.coord(Ax::names[i]));
  return c;
}

template <class Ax>
MeshSharded<V, Ax> make(const Mesh& mesh, Index br, Index bc, std::uint64_t seed) {
  const auto sizes = sizes_of<Ax>(mesh);
  const auto [rows, cols] = global_shape<Ax>(sizes, br, bc);
  return MeshSharded<V, Ax>(block_at<Ax>(my_coords<Ax>(mesh), br, bc, seed), rows, cols, mesh);
}

/// Whether an axis after i splits dimension `dim` (0 rows, 1 columns): then axis i's split of
/// that dimension is not the innermost, and gathering or splitting it there is E161.
template <class Ax>
constexpr bool later_splits(std::size_t i, int dim) {
  for (std::size_t j = i + 1; j < Ax::size; ++j)
    if ((dim == 0 && Ax::kinds[j] == K::row) || (dim == 1 && Ax::kinds[j] == K::col)) return true;
  return false;
}

/// The axis type at position I of an axis list.
template <std::size_t I, class Ax>
struct axis_at;
template <std::size_t I, class... Os>
struct axis_at<I, Axes<Os...>> {
  using type = typename std::tuple_element_t<I, std::tuple<Os...>>::axis;
};

template <class F, std::size_t... I>
void for_each_index(F&& f, std::index_sequence<I...>) {
  (f(std::integral_constant<std::size_t, I>{}), ...);
}

/// The last ledger entry: one collective of `kind` on axis `axis` over `elements` values (the
/// ledger's convention: the whole buffer of the axis's group, the input of a reduce_scatter and
/// the output of an all_gather).
inline void check_last(const Ledger& l, std::size_t before, CollectiveKind kind, std::string_view axis,
                       std::size_t elements) {
  REQUIRE(l.entries().size() == before + 1);
  const auto& e = l.entries().back();
  CHECK(e.kind == kind);
  CHECK(e.axis == axis);
  CHECK(e.elements == elements);
}

/// One layout combination: gather-back, then every redistribution that the layout allows on
/// every axis (the condition restated here: all_reduce and reduce_scatter on Partial, all_gather
/// on an innermost split, split from R or I into an innermost split, copy_to on I).
template <class Ax>
void layout_case(const Mesh& mesh, Ledger& ledger, std::uint64_t seed) {
  constexpr Index br = 12, bc = 12;  // divisible by every axis size used (2, 3, 4)
  const auto sizes = sizes_of<Ax>(mesh);
  const Mat dense = dense_of<Ax>(sizes, br, bc, seed);
  const auto x = make<Ax>(mesh, br, bc, seed);
  CAPTURE(axes_notation<Ax>());
  CHECK(to_dense(x) == dense);  // verification traffic: not in the ledger
  // The block's place: the nested index written out (outer axes first), and shard<Ax> of the
  // dense value takes exactly this rank's block (for a Partial axis: coordinate 0 holds the sum).
  const auto c = my_coords<Ax>(mesh);
  Index ri = 0, ci = 0;
  bool holder = true;
  for (std::size_t i = 0; i < Ax::size; ++i) {
    if (Ax::kinds[i] == K::row) ri = ri * sizes[i] + c[i];
    if (Ax::kinds[i] == K::col) ci = ci * sizes[i] + c[i];
    if (Ax::kinds[i] == K::partial && c[i] != 0) holder = false;
  }
  CHECK(x.row_offset() == ri * br);
  CHECK(x.col_offset() == ci * bc);
  const auto s = shard<Ax>(dense, mesh);
  const Mat want = holder ? Mat(dense.block(ri * br, ci * bc, br, bc)) : Mat(Mat::Zero(br, bc));
  CHECK(s.local() == want);
  CHECK(to_dense(s) == dense);
  const std::size_t block = static_cast<std::size_t>(br * bc);
  for_each_index(
      [&](auto ic) {
        constexpr std::size_t i = decltype(ic)::value;
        using A = typename axis_at<i, Ax>::type;
        constexpr K k = Ax::kinds[i];
        const std::size_t before = ledger.entries().size();
        if constexpr (k == K::partial) {
          CHECK(to_dense(all_reduce<A>(x)) == dense);
          check_last(ledger, before, CollectiveKind::all_reduce, A::name, block);
          CHECK(to_dense(all_reduce<A, Invariant>(x)) == dense);
          check_last(ledger, before + 1, CollectiveKind::all_reduce, A::name, block);
          if constexpr (!later_splits<Ax>(i, 0)) {
            CHECK(to_dense(reduce_scatter<A, RowSharded>(x)) == dense);
            check_last(ledger, before + 2, CollectiveKind::reduce_scatter, A::name, block);
          }
          if constexpr (!later_splits<Ax>(i, 1)) {
            const std::size_t n = ledger.entries().size();
            CHECK(to_dense(reduce_scatter<A, ColSharded>(x)) == dense);
            check_last(ledger, n, CollectiveKind::reduce_scatter, A::name, block);
          }
        } else if constexpr (k == K::row || k == K::col) {
          if constexpr (!later_splits<Ax>(i, k == K::row ? 0 : 1)) {
            CHECK(to_dense(all_gather<A>(x)) == dense);
            const std::size_t whole_block = block * static_cast<std::size_t>(sizes[i]);  // the gathered block
            check_last(ledger, before, CollectiveKind::all_gather, A::name, whole_block);
            CHECK(to_dense(all_gather<A, Invariant>(x)) == dense);
            check_last(ledger, before + 1, CollectiveKind::all_gather, A::name, whole_block);
          }
        } else {  // R or I: the splits are free
          if constexpr (!later_splits<Ax>(i, 0)) CHECK(to_dense(split<A, RowSharded>(x)) == dense);
          if constexpr (!later_splits<Ax>(i, 1)) CHECK(to_dense(split<A, ColSharded>(x)) == dense);
          if constexpr (k == K::invariant) CHECK(to_dense(copy_to<A>(x)) == dense);
          CHECK(ledger.entries().size() == before);
        }
      },
      std::make_index_sequence<Ax::size>{});
}

/// Every combination of the five layouts on two axes A1 (outer) and A2 (inner).
template <class A1, class A2, class L1, class... L2>
void pairs_with(const Mesh& mesh, Ledger& ledger, std::uint64_t& seed, std::tuple<L2...>) {
  (layout_case<Axes<On<A1, L1>, On<A2, L2>>>(mesh, ledger, seed++), ...);
}
template <class A1, class A2, class... L1>
void pairs_of(const Mesh& mesh, Ledger& ledger, std::uint64_t& seed, std::tuple<L1...>) {
  (pairs_with<A1, A2, L1>(mesh, ledger, seed, Five{}), ...);
}
template <class A1, class A2>
void all_pairs(const Mesh& mesh, Ledger& ledger, std::uint64_t seed) {
  pairs_of<A1, A2>(mesh, ledger, seed, Five{});
}

// ---- matmul axis by axis -------------------------------------------------------------------

/// The seven direct rules of one axis: (A's layout, B's layout).
using DirectPairs = std::tuple<std::pair<Replicated, Replicated>, std::pair<Replicated, ColSharded>,
                               std::pair<Replicated, Partial>, std::pair<RowSharded, Replicated>,
                               std::pair<ColSharded, RowSharded>, std::pair<Partial, Replicated>,
                               std::pair<Invariant, Invariant>>;

/// A[Ax A] · B[Ax B] on a two-axis mesh against the dense product of the two dense values.
template <class A1, class A2, class P1, class P2>
void matmul_case(const Mesh& mesh, std::uint64_t seed) {
  using AxA = Axes<On<A1, typename P1::first_type>, On<A2, typename P2::first_type>>;
  using AxB = Axes<On<A1, typename P1::second_type>, On<A2, typename P2::second_type>>;
  const auto sizes = sizes_of<AxA>(mesh);
  // The contracted dimension's block: A's columns and B's rows are split by the same axes (C · Row).
  Index kb = 4;
  const Index mb = 2, nb = 3;
  const Mat da = dense_of<AxA>(sizes, mb, kb, seed), db = dense_of<AxB>(sizes, kb, nb, seed + 1);
  const auto a = make<AxA>(mesh, mb, kb, seed);
  const auto b = make<AxB>(mesh, kb, nb, seed + 1);
  CAPTURE(axes_notation<AxA>());
  CAPTURE(axes_notation<AxB>());
  REQUIRE(da.cols() == db.rows());
  const Mat want = da * db;
  CHECK(to_dense(matmul(a, b)) == want);
}

template <class A1, class A2, class P1, class... P2>
void matmuls_with(const Mesh& mesh, std::uint64_t& seed, std::tuple<P2...>) {
  (matmul_case<A1, A2, P1, P2>(mesh, seed++), ...);
}
template <class A1, class A2, class... P1>
void matmuls_of(const Mesh& mesh, std::uint64_t& seed, std::tuple<P1...>) {
  (matmuls_with<A1, A2, P1>(mesh, seed, DirectPairs{}), ...);
}
template <class A1, class A2>
void all_matmuls(const Mesh& mesh, std::uint64_t seed) {
  matmuls_of<A1, A2>(mesh, seed, DirectPairs{});
}

}  // namespace mesh_laws
