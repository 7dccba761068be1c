// shardalg/backend/cpu/backend.hpp — the CPU backend policy: Eigen storage, GEMM through
// cblas_?gemm when shardalg::blas is linked (SHARDALG_HAVE_BLAS; Eigen's own kernel otherwise),
// elementwise maps as Eigen expressions.
//
// A backend is a type with:
//   matrix<T>                         local storage, row-major, with rows(), cols(), data(), size()
//   zeros<T>(r, c), empty<T>(r, c)    a zero block, an uninitialised one
//   gemm(α, op(A), op(B), β, C)       C := α·op(A)·op(B) + β·C on strided row-major views
//   copy_block(m, r0, c0, r, c)       a contiguous copy of a sub-block
//   pack_col_blocks / unpack_col_blocks   column blocks ↔ contiguous stacked blocks
//   to_host(m)                        the block as an Eigen matrix (for checks)
//   map(x, f), zip(x, y, f)           elementwise, f a functor (a device functor for CUDA)
//   col_sum(x), row_sum(x), add_row(x, b), softmax_rows(x)
//   cast<U>(x)                        elementwise conversion to element type U (optional: cast.hpp)
// The layout rules never touch a backend: they decide *which* local blocks meet; the backend
// decides *how* the local arithmetic runs. A CUDA backend supplies the same names over device
// memory (see include/shardalg/backend/cuda/ and docs/design.md).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "shardalg/backend/cpu/col_sum_order.hpp"
#include "shardalg/backend/cpu/eigen_kernels.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/functors.hpp"  // fn::OwnMath
#include "shardalg/base/index.hpp"
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(SHARDALG_HAVE_BLAS)
#include <cblas.h>
#if defined(SHARDALG_EXTERN_TEMPLATES)
// shardalg::compiled is built without BLAS: its instantiations would call Eigen's GEMM where this
// translation unit's call cblas — two definitions of one function, and the linker keeps one.
#error "shardalg::compiled and shardalg::blas do not combine: link one of them (docs/testing.md, 'Compile time')"
#endif
#endif

namespace shardalg {

static_assert(std::is_same_v<Index, Eigen::Index>, "shardalg::Index (base/index.hpp) must be Eigen::Index");

/// op(M) for a row-major block M at `data` with leading dimension `ld`: the effective matrix is
/// rows × cols; when `trans` is set, element (i, j) is M(j, i).
template <class T>
struct MatView {
  const T* data;
  Index rows, cols, ld;
  bool trans;

  /// Columns [c0, c0+w) of the effective matrix.
  MatView slice_cols(Index c0, Index w) const {
    return trans ? MatView{data + c0 * ld, rows, w, ld, true} : MatView{data + c0, rows, w, ld, false};
  }
  /// Rows [r0, r0+h) of the effective matrix.
  MatView slice_rows(Index r0, Index h) const {
    return trans ? MatView{data + r0, h, cols, ld, true} : MatView{data + r0 * ld, h, cols, ld, false};
  }
};

struct CpuBackend {
  static constexpr std::string_view name = "cpu";

  template <class T>
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  template <class T>
  static matrix<T> zeros(Index r, Index c) {
    return matrix<T>::Zero(r, c);
  }

  /// An uninitialised block (for outputs that are fully overwritten).
  template <class T>
  static matrix<T> empty(Index r, Index c) {
    return matrix<T>(r, c);
  }

  template <class T>
  static matrix<T> copy_block(const matrix<T>& m, Index r0, Index c0, Index r, Index c) {
    return m.block(r0, c0, r, c);
  }

  /// dst[r0:r0+src.rows, c0:c0+src.cols] := src (dst holds the rest).
  template <class T>
  static void paste_block(matrix<T>& dst, Index r0, Index c0, const matrix<T>& src) {
    dst.block(r0, c0, src.rows(), src.cols()) = src;
  }

  template <class T>
  static MatView<T> view(const matrix<T>& m, bool trans = false) {
    return trans ? MatView<T>{m.data(), m.cols(), m.rows(), m.cols(), true}
                 : MatView<T>{m.data(), m.rows(), m.cols(), m.cols(), false};
  }

  /// C := α·A·B + β·C, where A and B are effective (possibly transposed, strided) views.
  /// With shardalg::blas, float and double go straight to cblas_?gemm (row-major, transpose
  /// flags, leading dimensions: no copies, and C is not read when β = 0); otherwise Eigen's GEMM.
  /// The 16-bit types (Eigen::bfloat16, Eigen::half) are stored in 16 bits and multiplied in fp32:
  /// A and B are converted to float (exactly), α·A·B + β·C is formed by the float GEMM above
  /// (fp32 products and fp32 accumulation), and each element of C is rounded to T once.
  template <class T>
  static void gemm(T alpha, MatView<T> a, MatView<T> b, T beta, matrix<T>& c) {
    gemm(alpha, a, b, beta, c.data(), c.cols());
  }
  /// The same into a strided row-major block: C is [a.rows, b.cols] at c with leading dimension ldc.
  template <class T>
  static void gemm(T alpha, MatView<T> a, MatView<T> b, T beta, T* c, Index ldc);

  /// [rows, P·w] → P blocks [rows, w] stacked: block s is columns [s·w, (s+1)·w).
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, int p) {
    const Index w = x.cols() / p, r = x.rows();
    matrix<T> out(p * r, w);
    for (int s = 0; s < p; ++s) out.middleRows(s * r, r) = x.middleCols(s * w, w);
    return out;
  }
  /// The inverse of pack_col_blocks: P stacked blocks [rows, w] → [rows, P·w].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& stacked, int p) {
    const Index r = stacked.rows() / p, w = stacked.cols();
    matrix<T> out(r, p * w);
    for (int s = 0; s < p; ++s) out.middleCols(s * w, w) = stacked.middleRows(s * r, r);
    return out;
  }

  /// Uneven column blocks: [rows, Σw] → the blocks [rows, w_s] one after another in a flat
  /// [1, rows·Σw] buffer (block s is columns [Σ_{t<s} w_t, … + w_s)).
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, const std::vector<Index>& widths) {
    const Index r = x.rows();
    matrix<T> out(1, x.size());
    Index c0 = 0, at = 0;
    for (const Index w : widths) {
      Eigen::Map<matrix<T>>(out.data() + at, r, w) = x.middleCols(c0, w);
      c0 += w;
      at += r * w;
    }
    return out;
  }
  /// The inverse: the flat blocks [rows, w_s] one after another → [rows, Σw].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& flat, Index rows, const std::vector<Index>& widths) {
    Index total = 0;
    for (const Index w : widths) total += w;
    matrix<T> out(rows, total);
    Index c0 = 0, at = 0;
    for (const Index w : widths) {
      out.middleCols(c0, w) = Eigen::Map<const matrix<T>>(flat.data() + at, rows, w);
      c0 += w;
      at += rows * w;
    }
    return out;
  }

  /// The block as a host (Eigen) matrix: the identity here; a device backend downloads.
  template <class T>
  static const matrix<T>& to_host(const matrix<T>& m) {
    return m;
  }

  /// f applied elementwise; a functor with a `cpu_apply(in, out, n)` for this element type (a
  /// contiguous kernel: nn::GeluTanh on float, backend/cpu/simd.hpp) runs that, one with an `array(x)`
  /// form (a whole-array expression) runs vectorised by Eigen.
  /// A NarrowStorage T (bf16, fp16) maps in compute_t<T> and rounds each element once, as every
  /// kernel does: a scalar functor over T itself would round each intermediate to T, and mixes T
  /// with float through Eigen's bfloat16 ∘ int overloads (1 + exp(−x) truncated to 1).
  template <class T, class F>
  static matrix<T> map(const matrix<T>& x, F f) {
    if constexpr (NarrowStorage<T> && std::is_invocable_v<const F&, compute_t<T>>) {
      return map<compute_t<T>>(x.template cast<compute_t<T>>(), f).template cast<T>();
    } else if constexpr (requires(T* out) { f.cpu_apply(x.data(), out, x.size()); }) {
      matrix<T> y(x.rows(), x.cols());
      f.cpu_apply(x.data(), y.data(), x.size());
      return y;
    } else if constexpr (requires { f.array(x.array()); }) return f.array(x.array()).matrix();
    else return x.unaryExpr(f);
  }
  /// Each element converted to U (static_cast semantics).
  template <class U, class T>
  static matrix<U> cast(const matrix<T>& x) {
    return x.template cast<U>();
  }
  template <class T, class F>
  static matrix<T> zip(const matrix<T>& x, const matrix<T>& y, F f) {
    return x.binaryExpr(y, f);
  }
  /// [1, K]: Σ over rows. float and double stream the rows in Eigen's order (Eigen's bits, one
  /// sweep of memory: backend/cpu/col_sum_order.hpp).
  template <class T>
  static matrix<T> col_sum(const matrix<T>& x) {
    if constexpr (NarrowStorage<T>) return col_sum<compute_t<T>>(x.template cast<compute_t<T>>()).template cast<T>();  // fp32 sums
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      matrix<T> s(1, x.cols());
      ColSumOrder<T>::sum(x.data(), x.rows(), x.cols(), x.cols(), s.data());
      return s;
    } else {
      // Of an empty block, zeros: Eigen's partial reduction of a matrix with no data offsets a
      // null pointer (undefined behaviour; UBSan reports it).
      if (x.size() == 0) return matrix<T>::Zero(1, x.cols());
      return x.colwise().sum();
    }
  }
  /// [I, 1]: Σ over columns (zeros of an empty block, as col_sum).
  template <class T>
  static matrix<T> row_sum(const matrix<T>& x) {
    if constexpr (HostHalf<T>) {
      return row_sum<compute_t<T>>(x.template cast<compute_t<T>>()).template cast<T>();  // fp32 sums
    } else {
      if (x.size() == 0) return matrix<T>::Zero(x.rows(), 1);
      return x.rowwise().sum();
    }
  }
  /// x + 1·b for a row vector b[1, K].
  template <class T>
  static matrix<T> add_row(const matrix<T>& x, const matrix<T>& b) {
    return x.rowwise() + b.row(0);
  }
  /// Numerically stable softmax over each row.
  template <class T>
  static matrix<T> softmax_rows(const matrix<T>& x) {
    if constexpr (HostHalf<T>) {
      return softmax_rows<compute_t<T>>(x.template cast<compute_t<T>>()).template cast<T>();  // fp32, rounded once
    } else {
      matrix<T> y = (x.colwise() - x.rowwise().maxCoeff()).array().exp().matrix();
      const auto s = y.rowwise().sum().eval();
      for (Index i = 0; i < y.rows(); ++i) y.row(i) /= s(i);
      return y;
    }
  }
};

// Defined outside the class (not inline), so that shardalg::compiled can hold its instantiations.
template <class T>
void CpuBackend::gemm(T alpha, MatView<T> a, MatView<T> b, T beta, T* c, Index ldc) {
    const Index m = a.rows, n = b.cols;
    if constexpr (NarrowStorage<T>) {
      if (m == 0 || n == 0) return;
      // The stored block of a view (rows × cols, or its transpose), converted to contiguous float.
      const auto widen = [](MatView<T> v, matrix<compute_t<T>>& buf) {
        const Index sr = v.trans ? v.cols : v.rows, sc = v.trans ? v.rows : v.cols;
        buf.resize(sr, sc);
        for (Index i = 0; i < sr; ++i)
          for (Index j = 0; j < sc; ++j) buf(i, j) = static_cast<compute_t<T>>(v.data[i * v.ld + j]);
        return MatView<compute_t<T>>{buf.data(), v.rows, v.cols, std::max<Index>(sc, 1), v.trans};
      };
      matrix<compute_t<T>> af, bf, cf(m, n);
      const MatView<compute_t<T>> va = widen(a, af), vb = widen(b, bf);
      const compute_t<T> fb = static_cast<compute_t<T>>(beta);
      if (fb != 0.0f)
        for (Index i = 0; i < m; ++i)
          for (Index j = 0; j < n; ++j) cf(i, j) = static_cast<compute_t<T>>(c[i * ldc + j]);
      gemm<compute_t<T>>(static_cast<compute_t<T>>(alpha), va, vb, fb, cf.data(), n);
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) c[i * ldc + j] = T(cf(i, j));
      return;
    } else {
      using Stride = Eigen::OuterStride<>;
      Eigen::Map<matrix<T>, 0, Stride> C(c, m, n, Stride(std::max<Index>(ldc, 1)));
      if (m == 0 || n == 0) return;
#if defined(SHARDALG_HAVE_BLAS)
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const auto k = static_cast<int>(a.cols);
        if (k == 0) {
          if (beta == T(0)) C.setZero();
          else C *= beta;
          return;
        }
        const auto ta = a.trans ? CblasTrans : CblasNoTrans, tb = b.trans ? CblasTrans : CblasNoTrans;
        const auto lda = static_cast<int>(std::max<Index>(1, a.ld)), ldb = static_cast<int>(std::max<Index>(1, b.ld));
        const auto mi = static_cast<int>(m), ni = static_cast<int>(n), ldci = static_cast<int>(std::max<Index>(ldc, 1));
        if constexpr (std::is_same_v<T, float>)
          cblas_sgemm(CblasRowMajor, ta, tb, mi, ni, k, alpha, a.data, lda, b.data, ldb, beta, c, ldci);
        else
          cblas_dgemm(CblasRowMajor, ta, tb, mi, ni, k, alpha, a.data, lda, b.data, ldb, beta, c, ldci);
        return;
      } else  // each path in its own branch: code after an `if constexpr` that returns is still compiled
#endif
      if constexpr (fn::OwnMath<T>) {
        // A running bound's element (precision/element.hpp): the products summed in k order — its
        // open sums cover any order — without Eigen's GEMM kernel for a class type (four of them
        // per element type cost a test TU about 0.5 GB of compiler memory).
        const Index k = a.cols;
        const auto at = [](const MatView<T>& v, Index i, Index j) -> const T& {
          return v.trans ? v.data[j * v.ld + i] : v.data[i * v.ld + j];
        };
        for (Index i = 0; i < m; ++i)
          for (Index j = 0; j < n; ++j) {
            T acc = T(0);
            for (Index l = 0; l < k; ++l) acc += at(a, i, l) * at(b, l, j);
            T& cij = c[i * ldc + j];
            cij = beta == T(0) ? alpha * acc : beta * cij + alpha * acc;
          }
      } else {
        using Map = Eigen::Map<const matrix<T>, 0, Stride>;
        const Map A(a.data, a.trans ? a.cols : a.rows, a.trans ? a.rows : a.cols, Stride(std::max<Index>(a.ld, 1)));
        const Map B(b.data, b.trans ? b.cols : b.rows, b.trans ? b.rows : b.cols, Stride(std::max<Index>(b.ld, 1)));
        if (beta == T(0)) C.setZero();
        else if (beta != T(1)) C *= beta;
        // Eigen dispatches each combination to its GEMM kernel with transpose flags: no copies.
        if (!a.trans && !b.trans) C.noalias() += alpha * (A * B);
        else if (a.trans && !b.trans) C.noalias() += alpha * (A.transpose() * B);
        else if (!a.trans && b.trans) C.noalias() += alpha * (A * B.transpose());
        else C.noalias() += alpha * (A.transpose() * B.transpose());
      }
    }
  }

#if defined(SHARDALG_EXTERN_TEMPLATES)  // compiled in src/backend.cpp (shardalg::compiled)
extern template void CpuBackend::gemm<float>(float, MatView<float>, MatView<float>, float, float*, Index);
extern template void CpuBackend::gemm<double>(double, MatView<double>, MatView<double>, double, double*, Index);
extern template void CpuBackend::gemm<std::int32_t>(std::int32_t, MatView<std::int32_t>, MatView<std::int32_t>,
                                                   std::int32_t, std::int32_t*, Index);
extern template void CpuBackend::gemm<std::int64_t>(std::int64_t, MatView<std::int64_t>, MatView<std::int64_t>,
                                                   std::int64_t, std::int64_t*, Index);
#endif

}  // namespace shardalg
