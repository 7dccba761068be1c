// shardalg/backend/emu/backend.hpp — EmuBackend: the core's backend policy (backend/cpu/backend.hpp,
// the surface CudaBackend also implements) over emulated device memory, so that the core's
// algebra, its collectives and the layers run on blocks the host cannot read: a host dereference
// of a block is a SIGSEGV that names the allocation (fault.hpp), in CI, without a GPU.
//
//   matrix<T>                 EmuMatrix<T> (device_matrix.hpp: mmap'd pages kept PROT_NONE)
//   zeros / empty             fresh zero pages / 0xFF bytes (uninitialised device memory)
//   copy_block / paste_block  strided copies between opened blocks
//   view(m, trans)            the core's MatView over the device pointer (no copy, nothing opened)
//   gemm(α, A, B, β, C)       CpuBackend::gemm on the opened pages of A, B and C (the views' own
//                             ranges are checked against their allocations)
//   pack / unpack_col_blocks, map, cast, zip, col_sum, row_sum, add_row, softmax_rows
//                             download (open, copy, close), CpuBackend's operation on the host
//                             copy, upload the result: CpuBackend's bits
//   to_host / to_device       download / upload
//
// Each entry point opens the allocations it touches for its own duration only; between calls
// every block is closed (Registry::get().open() == 0). Bad shapes are typed exceptions naming the
// values, as CudaBackend's are.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "shardalg/backend/block_check.hpp"
#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/emu/device_matrix.hpp"
#include "shardalg/backend/emu/registry.hpp"
#include "shardalg/base/errors.hpp"

namespace shardalg::emu {

namespace detail {
/// Bytes a view's elements span: (stored rows − 1)·ld + stored cols, 0 when empty.
template <class T>
std::size_t view_bytes(const MatView<T>& v) {
  if (v.rows == 0 || v.cols == 0) return 0;
  const Index sr = v.trans ? v.cols : v.rows, sc = v.trans ? v.rows : v.cols;
  return static_cast<std::size_t>((sr - 1) * v.ld + sc) * sizeof(T);
}
/// rows × cols elements with leading dimension ld copied from src to dst (both opened).
template <class T>
void copy_2d(T* dst, Index dld, const T* src, Index sld, Index rows, Index cols) {
  for (Index i = 0; i < rows; ++i)
    std::memcpy(static_cast<void*>(dst + i * dld), src + i * sld, static_cast<std::size_t>(cols) * sizeof(T));
}
}  // namespace detail

struct EmuBackend {
  static constexpr std::string_view name = "emu";

  template <class T>
  using matrix = EmuMatrix<T>;

  template <class T>
  static matrix<T> zeros(Index r, Index c) {
    return matrix<T>::zeros(r, c);
  }
  /// Uninitialised (0xFF bytes): for outputs that are fully overwritten.
  template <class T>
  static matrix<T> empty(Index r, Index c) {
    return matrix<T>(r, c);
  }

  template <class T>
  static matrix<T> copy_block(const matrix<T>& m, Index r0, Index c0, Index r, Index c) {
    shardalg::detail::check_block_inside("EmuBackend::copy_block", r0, c0, r, c, m.rows(), m.cols());
    matrix<T> out = zeros<T>(r, c);
    if (out.size() == 0) return out;
    const Open src(m.data(), m.bytes(), "EmuBackend::copy_block"), dst(out.data(), out.bytes(), "EmuBackend::copy_block");
    detail::copy_2d(out.data(), c, m.data() + r0 * m.cols() + c0, m.cols(), r, c);
    return out;
  }

  /// dst[r0:r0+src.rows, c0:c0+src.cols] := src (dst holds the rest).
  template <class T>
  static void paste_block(matrix<T>& dst, Index r0, Index c0, const matrix<T>& src) {
    shardalg::detail::check_block_inside("EmuBackend::paste_block", r0, c0, src.rows(), src.cols(), dst.rows(),
                                         dst.cols());
    if (src.size() == 0) return;
    const Open s(src.data(), src.bytes(), "EmuBackend::paste_block"), d(dst.data(), dst.bytes(), "EmuBackend::paste_block");
    detail::copy_2d(dst.data() + r0 * dst.cols() + c0, dst.cols(), src.data(), src.cols(), src.rows(), src.cols());
  }

  template <class T>
  static MatView<T> view(const matrix<T>& m, bool trans = false) {
    return trans ? MatView<T>{m.data(), m.cols(), m.rows(), m.cols(), true}
                 : MatView<T>{m.data(), m.rows(), m.cols(), m.cols(), false};
  }

  /// C := α·op(A)·op(B) + β·C.
  template <class T>
  static void gemm(T alpha, MatView<T> a, MatView<T> b, T beta, matrix<T>& c) {
    if (c.rows() != a.rows || c.cols() != b.cols)
      throw ShapeError(shardalg::detail::cat("EmuBackend::gemm: ", a.rows, "x", a.cols, " · ", b.rows, "x", b.cols,
                                             " into ", c.rows(), "x", c.cols()));
    gemm(alpha, a, b, beta, c.data(), c.cols());
  }
  /// The same into a strided block of device memory: C is [a.rows, b.cols] at c, leading dimension ldc.
  template <class T>
  static void gemm(T alpha, MatView<T> a, MatView<T> b, T beta, T* c, Index ldc) {
    if (a.cols != b.rows)
      throw ShapeError(shardalg::detail::cat("EmuBackend::gemm: ", a.rows, "x", a.cols, " · ", b.rows, "x", b.cols,
                                             ": inner dimensions differ"));
    const MatView<T> cv{c, a.rows, b.cols, ldc, false};
    const Open oa(a.data, detail::view_bytes(a), "EmuBackend::gemm (A)"), ob(b.data, detail::view_bytes(b), "EmuBackend::gemm (B)"),
        oc(c, detail::view_bytes(cv), "EmuBackend::gemm (C)");
    CpuBackend::gemm(alpha, a, b, beta, c, ldc);
  }

  /// [rows, P·w] → P blocks [rows, w] stacked: block s is columns [s·w, (s+1)·w).
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, int p) {
    check_split("pack_col_blocks", x.cols(), "columns", p);
    return CpuBackend::pack_col_blocks(x.host(), p);
  }
  /// The inverse: P stacked blocks [rows, w] → [rows, P·w].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& stacked, int p) {
    check_split("unpack_col_blocks", stacked.rows(), "rows", p);
    return CpuBackend::unpack_col_blocks(stacked.host(), p);
  }
  /// Uneven column blocks: [rows, Σw] → the blocks [rows, w_s] one after another, flat [1, rows·Σw].
  template <class T>
  static matrix<T> pack_col_blocks(const matrix<T>& x, const std::vector<Index>& widths) {
    const Index total = check_widths("pack_col_blocks", widths);
    if (total != x.cols())
      throw ShapeError(shardalg::detail::cat("EmuBackend::pack_col_blocks: block widths summing to ", total,
                                             " for a matrix of ", x.cols(), " columns"));
    return CpuBackend::pack_col_blocks(x.host(), widths);
  }
  /// The inverse: the flat blocks [rows, w_s] one after another → [rows, Σw].
  template <class T>
  static matrix<T> unpack_col_blocks(const matrix<T>& flat, Index rows, const std::vector<Index>& widths) {
    const Index total = check_widths("unpack_col_blocks", widths);
    if (rows < 0 || flat.size() != rows * total)
      throw ShapeError(shardalg::detail::cat("EmuBackend::unpack_col_blocks: ", flat.size(), " elements for ", rows,
                                             " rows of blocks summing to ", total, " columns"));
    return CpuBackend::unpack_col_blocks(flat.host(), rows, widths);
  }

  template <class T, class F>
  static matrix<T> map(const matrix<T>& x, F f) {
    return CpuBackend::map(x.host(), f);
  }
  template <class U, class T>
  static matrix<U> cast(const matrix<T>& x) {
    return CpuBackend::cast<U>(x.host());
  }
  template <class T, class F>
  static matrix<T> zip(const matrix<T>& x, const matrix<T>& y, F f) {
    if (x.rows() != y.rows() || x.cols() != y.cols())
      throw ShapeError(shardalg::detail::cat("EmuBackend::zip: shapes differ: ", x.rows(), "x", x.cols(), " and ",
                                             y.rows(), "x", y.cols()));
    return CpuBackend::zip(x.host(), y.host(), f);
  }
  /// [1, K]: Σ over rows.
  template <class T>
  static matrix<T> col_sum(const matrix<T>& x) {
    return CpuBackend::col_sum(x.host());
  }
  /// [I, 1]: Σ over columns.
  template <class T>
  static matrix<T> row_sum(const matrix<T>& x) {
    return CpuBackend::row_sum(x.host());
  }
  /// x + 1·b for a row vector b[1, K].
  template <class T>
  static matrix<T> add_row(const matrix<T>& x, const matrix<T>& b) {
    if (b.rows() != 1 || b.cols() != x.cols())
      throw ShapeError(shardalg::detail::cat("EmuBackend::add_row: bias ", b.rows(), "x", b.cols(), " for ", x.rows(),
                                             "x", x.cols()));
    return CpuBackend::add_row(x.host(), b.host());
  }
  /// Numerically stable softmax over each row.
  template <class T>
  static matrix<T> softmax_rows(const matrix<T>& x) {
    return CpuBackend::softmax_rows(x.host());
  }

  // ---- transfers ---------------------------------------------------------------------------------
  template <class T>
  static HostMatrix<T> to_host(const matrix<T>& m) {
    return m.host();
  }
  template <class T, class Derived>
  static matrix<T> to_device(const Eigen::MatrixBase<Derived>& h) {
    return matrix<T>(h);
  }

 private:
  static void check_split(std::string_view op, Index n, std::string_view what, int p) {
    if (p < 1 || n % p != 0)
      throw DivisibilityError(
          shardalg::detail::cat("EmuBackend::", op, ": ", n, " ", what, " do not split into ", p, " equal blocks"));
  }
  static Index check_widths(std::string_view op, const std::vector<Index>& widths) {
    Index total = 0;
    for (const Index w : widths) {
      if (w < 0) throw ShapeError(shardalg::detail::cat("EmuBackend::", op, ": negative block width ", w));
      total += w;
    }
    return total;
  }
};

}  // namespace shardalg::emu
