// shardalg/backend/cpu/col_sum_order.hpp — Σ over the rows of a row-major block, streaming the rows
// (contiguous loads, the running sums in L1), in the order Eigen's colwise().sum() adds them, so
// the result has Eigen's bits: the CPU backend's col_sum and the fused kernels that produce a
// bias gradient in the pass that computes it (backend/cpu/fused.hpp) both use it.
//
// Eigen 3.4 vectorises a row-major column sum over the first `paired` columns (whole packets of
// its build's width) and adds their rows as row 0, then ((r_i + r_i+1) + (r_i+2 + r_i+3)) for
// i = 1, 5, … while i < (rows − 1) & ~3, then one row at a time; the remaining columns one row
// at a time. It walks each packet of columns down all the rows (a strided sweep per packet);
// this walks the rows once. tests/unit/test_fused.cpp checks the bits against Eigen's.
#pragma once

#include <Eigen/Core>
#include <algorithm>

namespace shardalg {

template <class T>
struct ColSumOrder {
  using Index = Eigen::Index;
  /// How many leading columns Eigen's colwise().sum() reduces packet-wise.
  static Index paired(Index cols) {
#if EIGEN_VERSION_AT_LEAST(3, 4, 0)
    using PT = Eigen::internal::packet_traits<T>;
    if constexpr (PT::Vectorizable && PT::size > 1) return cols - cols % PT::size;
#endif
    return 0;
  }
  /// Drive a row producer through that order: step(i0, k, first) makes rows i0 … i0+k−1
  /// available (k = 1 or 4) and adds them with add(); the first step (row 0) initialises.
  template <class Step>
  static void schedule(Index rows, Step&& step) {
    if (rows == 0) return;
    step(Index(0), Index(1), true);
    const Index size4 = (rows - 1) & ~Index(3);
    Index i = 1;
    for (; i < size4; i += 4) step(i, Index(4), false);
    for (; i < rows; ++i) step(i, Index(1), false);
  }
  /// acc := r[0] (first), else acc + the k rows r[0..k) in Eigen's order.
  static void add(T* acc, const T* const* r, Index k, bool first, Index cols, Index paired) {
    if (first) {
      std::copy_n(r[0], cols, acc);
      return;
    }
    if (k == 1) {
      const T* a = r[0];
      for (Index j = 0; j < cols; ++j) acc[j] = acc[j] + a[j];
      return;
    }
    const T *a = r[0], *b = r[1], *c = r[2], *d = r[3];
    for (Index j = 0; j < paired; ++j) acc[j] = acc[j] + ((a[j] + b[j]) + (c[j] + d[j]));
    for (Index j = paired; j < cols; ++j) acc[j] = (((acc[j] + a[j]) + b[j]) + c[j]) + d[j];
  }
  /// out[0..cols) := Σ_i x[i·ld + j] (out zeroed when rows = 0).
  static void sum(const T* x, Index rows, Index cols, Index ld, T* out) {
    if (rows == 0) {
      std::fill_n(out, cols, T(0));
      return;
    }
    const Index p = paired(cols);
    schedule(rows, [&](Index i0, Index k, bool first) {
      const T* r[4];
      for (Index q = 0; q < k; ++q) r[q] = x + (i0 + q) * ld;
      add(out, r, k, first, cols, p);
    });
  }
};

}  // namespace shardalg
