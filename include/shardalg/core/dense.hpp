// shardalg/core/dense.hpp — the bridge to the dense reference.
//
//   shard<L>(A, g)      every rank takes its share of a dense matrix it holds (no communication);
//                       for Partial, rank 0 holds A and the others zero
//   to_dense(x)         the dense value on every rank (gathers; verification traffic, not ledgered)
//   compare(a, e)       max absolute and normwise relative error, and where
//   replicas_agree(x)   for x[R]: do all ranks hold the same bits?
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

template <Layout L, class Derived, class B = CpuBackend>
auto shard(const Eigen::MatrixBase<Derived>& dense, Group g) {
  using T = typename Derived::Scalar;
  const Index rows = dense.rows(), cols = dense.cols();
  const int p = g.size(), r = g.rank();
  detail::check_divisible(L::kind, rows, cols, p, "shard<", L::name, ">");
  const auto [lr, lc] = local_shape(L::kind, rows, cols, p);
  typename B::template matrix<T> local;
  if constexpr (L::kind == LayoutKind::row) local = dense.middleRows(r * lr, lr);
  else if constexpr (L::kind == LayoutKind::col) local = dense.middleCols(r * lc, lc);
  else if constexpr (L::kind == LayoutKind::partial) local = r == 0 ? typename B::template matrix<T>(dense) : B::template zeros<T>(rows, cols);
  else local = dense;
  return Sharded<T, L, B>(std::move(local), rows, cols, std::move(g));
}

/// The dense matrix on every rank. Communicates (all_gather or all_reduce) for Row, C and
/// Partial, marked as verification traffic so the ledger's counts stay the model's.
template <class T, class L, class B>
typename B::template matrix<T> to_dense(const Sharded<T, L, B>& x) {
  detail::check_operand(x.group(), "to_dense");
  const CallInfo info{L::notation, "dense", true};
  Group g = x.group();
  if constexpr (SplitLayout<L>) {
    return detail::gather_local(x, g, info);
  } else if constexpr (std::is_same_v<L, Partial>) {
    auto out = x.local();
    g.all_reduce(out.data(), static_cast<std::size_t>(out.size()), ReduceOp::sum, info);
    return out;
  } else {
    return x.local();
  }
}

/// For x[R]: true when every rank's copy equals rank 0's bit for bit.
template <class T, class B>
bool replicas_agree(const Sharded<T, Replicated, B>& x) {
  detail::check_operand(x.group(), "replicas_agree");
  Group g = x.group();
  const CallInfo info{"R", "R", true};
  auto root = x.local();
  g.broadcast(root.data(), static_cast<std::size_t>(root.size()), 0, info);
  std::int32_t differ = root == x.local() ? 0 : 1;
  g.all_reduce(&differ, 1, ReduceOp::max, info);
  return differ == 0;
}

/// Max absolute error, normwise relative error (max |a − e| / max |e|) and where the max sits.
struct ErrorReport {
  double max_abs = 0;
  double max_rel = 0;
  Index row = -1, col = -1;
  bool shape_ok = true;

  [[nodiscard]] bool within(double rel_tol) const { return shape_ok && max_rel <= rel_tol; }
  friend std::ostream& operator<<(std::ostream& os, const ErrorReport& r) {
    if (!r.shape_ok) return os << "shape mismatch";
    return os << "max abs " << r.max_abs << ", rel " << r.max_rel << " at (" << r.row << ", " << r.col << ")";
  }
};

template <class DA, class DE>
ErrorReport compare(const Eigen::MatrixBase<DA>& actual, const Eigen::MatrixBase<DE>& expected) {
  ErrorReport rep;
  if (actual.rows() != expected.rows() || actual.cols() != expected.cols()) {
    rep.shape_ok = false;
    rep.max_abs = rep.max_rel = std::numeric_limits<double>::infinity();
    return rep;
  }
  double scale = 0;
  for (Index i = 0; i < actual.rows(); ++i)
    for (Index j = 0; j < actual.cols(); ++j) {
      const double e = static_cast<double>(expected(i, j));
      const double d = std::abs(static_cast<double>(actual(i, j)) - e);
      scale = std::max(scale, std::abs(e));
      if (d > rep.max_abs || std::isnan(d)) {
        rep.max_abs = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
        rep.row = i;
        rep.col = j;
      }
    }
  rep.max_rel = rep.max_abs == 0 ? 0 : rep.max_abs / (scale > 0 ? scale : std::numeric_limits<double>::min());
  return rep;
}

/// Compare a sharded tensor with its dense reference (gathers first).
template <class T, class L, class B, class DE>
ErrorReport compare(const Sharded<T, L, B>& actual, const Eigen::MatrixBase<DE>& expected) {
  return compare(B::to_host(to_dense(actual)), expected);
}

}  // namespace shardalg
