// shardalg/mesh/ops.hpp — matmul and elementwise arithmetic of MeshSharded tensors, axis by axis.
//
// matmul(A[a_1, …, a_n], B[b_1, …, b_n]) on the same axes in the same order applies §3's rule on
// every axis i: a_i · b_i → c_i. The local product of the local blocks is the result's block when
// every axis's rule is a direct one (R·R, R·C, Row·R, C·Row, Partial·R, R·Partial, …): the axes
// split different indices, or contract the same one in the same nesting order, and Partial axes
// multiply summand by summand (Σ_r A_r · Σ_s B_s on two different axes is Σ_{r,s} A_r B_s).
//
//   X[dp:Row, tp:R] · W[dp:R, tp:C]   → Y[dp:Row, tp:C]         (the column-parallel linear, DP×TP)
//   Y[dp:Row, tp:C] · V[dp:R, tp:Row] → Z[dp:Row, tp:Partial]   (row-parallel: all_reduce<tp> next)
//
// An axis with an invalid rule gives that rule's one-axis diagnostic (E101–E106); an axis whose
// rule needs a free slice (R·Row, C·R) gives E162; operands on different axes, E163.
#pragma once

#include "shardalg/core/matmul.hpp"
#include "shardalg/base/rules.hpp"
#include "shardalg/mesh/sharded.hpp"

namespace shardalg {

namespace mesh_detail {
template <class XA, class XB>
struct matmul_axes;
template <class... OA, class... OB>
struct matmul_axes<Axes<OA...>, Axes<OB...>> {
  using type = Axes<On<typename OA::axis, layout_t<matmul_rule(OA::layout::kind, OB::layout::kind).result>>...>;
  static constexpr MatmulRule first_invalid = [] {
    constexpr MatmulRule rules[] = {matmul_rule(OA::layout::kind, OB::layout::kind)...};
    for (const auto& r : rules)
      if (!r.valid) return r;
    return rules[0];
  }();
  static constexpr bool all_valid = (matmul_rule(OA::layout::kind, OB::layout::kind).valid && ...);
  static constexpr bool all_direct = ((matmul_rule(OA::layout::kind, OB::layout::kind).form == LocalForm::direct) && ...);
};

inline void check_same_groups(const auto& a, const auto& b, std::string_view op) {
  for (std::size_t i = 0; i < a.groups().size(); ++i) detail::check_same_group(a.groups()[i], b.groups()[i], op);
}
}  // namespace mesh_detail

template <class T, class AxA, class AxB, class B>
auto matmul(const MeshSharded<T, AxA, B>& a, const MeshSharded<T, AxB, B>& b) {
  if constexpr (!mesh_detail::same_axes<AxA, AxB>()) {
    return diagnose<Diag::axes_differ, AxA>();
  } else {
    using M = mesh_detail::matmul_axes<AxA, AxB>;
    if constexpr (!M::all_valid) {
      return diagnose<M::first_invalid.error, AxA>();
    } else if constexpr (!M::all_direct) {
      return diagnose<Diag::needs_slice, AxA>();
    } else {
      mesh_detail::check_same_groups(a, b, "matmul");
      if (a.cols() != b.rows())
        throw ShapeError(detail::cat("matmul: inner dimensions do not match: ", a.rows(), "x", a.cols(), " · ",
                                     b.rows(), "x", b.cols()));
      auto c = B::template empty<T>(a.local_rows(), b.local_cols());
      B::gemm(T(1), B::view(a.local(), false), B::view(b.local(), false), T(0), c);
      return MeshSharded<T, typename M::type, B>(std::move(c), a.rows(), b.cols(), a.groups());
    }
  }
}

/// x + y and x − y of one type (the same layout on every axis; a Partial axis adds summands).
template <class T, class Ax, class B>
MeshSharded<T, Ax, B> operator+(const MeshSharded<T, Ax, B>& x, const MeshSharded<T, Ax, B>& y) {
  mesh_detail::check_same_groups(x, y, "add");
  if (x.rows() != y.rows() || x.cols() != y.cols())
    throw ShapeError(detail::cat("add: shapes differ: ", x.rows(), "x", x.cols(), " and ", y.rows(), "x", y.cols()));
  typename B::template matrix<T> out = x.local() + y.local();
  return {std::move(out), x.rows(), x.cols(), x.groups()};
}
template <class T, class Ax, class B>
MeshSharded<T, Ax, B> operator-(const MeshSharded<T, Ax, B>& x, const MeshSharded<T, Ax, B>& y) {
  mesh_detail::check_same_groups(x, y, "sub");
  if (x.rows() != y.rows() || x.cols() != y.cols())
    throw ShapeError(detail::cat("sub: shapes differ: ", x.rows(), "x", x.cols(), " and ", y.rows(), "x", y.cols()));
  typename B::template matrix<T> out = x.local() - y.local();
  return {std::move(out), x.rows(), x.cols(), x.groups()};
}
/// s · x (any layouts: scaling commutes with every sum and split).
template <class T, class Ax, class B>
MeshSharded<T, Ax, B> scale(const MeshSharded<T, Ax, B>& x, T s) {
  typename B::template matrix<T> out = x.local() * s;
  return {std::move(out), x.rows(), x.cols(), x.groups()};
}

}  // namespace shardalg
