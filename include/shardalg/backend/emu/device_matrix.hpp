// shardalg/backend/emu/device_matrix.hpp — EmuMatrix<T>: a row-major rows × cols block of emulated
// device memory (registry.hpp), with the members of cuda::DeviceMatrix (rows, cols, size, bytes,
// data, resize, set_zero, zeros, host, copy_to_host, copy_from_host, ==), so that code written
// for the CUDA backend's matrix compiles against it — and faults where it would read device
// memory on the host.
//
//   EmuMatrix<float> d = host;        // upload an Eigen matrix or expression (any storage order)
//   CpuBackend::matrix<float> h = d.host();   // download
//   const float* p = d.data();        // a device pointer: *p is a SIGSEGV with the handler's message
//
// Every member that touches the elements opens the allocation for its own duration (Open) and
// leaves it closed. A new uninitialised block (EmuMatrix(r, c), resize) is filled with 0xFF bytes
// — a NaN in every floating type, −1 in every integer one — as device memory holds garbage: code
// that reads a block it never wrote sees it. zeros() is zeros. An empty block owns no memory and
// its data() is null.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/emu/fault.hpp"
#include "shardalg/backend/emu/registry.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/index.hpp"

namespace shardalg::emu {

/// The host matrix an emu matrix downloads to.
template <class T>
using HostMatrix = CpuBackend::matrix<T>;

template <class T>
class EmuMatrix {
  static_assert(std::is_trivially_copyable_v<T>, "EmuMatrix holds trivially copyable elements (it is copied bytewise)");

 public:
  using value_type = T;
  using Scalar = T;

  EmuMatrix() = default;
  /// Uninitialised r × c (0xFF bytes).
  EmuMatrix(Index r, Index c) { allocate(r, c, Fill::garbage); }
  /// Upload a host matrix or Eigen expression (converted to T).
  template <class Derived>
  EmuMatrix(const Eigen::MatrixBase<Derived>& host) {  // NOLINT: implicit, like Eigen's own and DeviceMatrix
    upload(host);
  }

  EmuMatrix(const EmuMatrix& o) {
    allocate(o.rows_, o.cols_, Fill::none);
    copy_from_device(o);
  }
  EmuMatrix(EmuMatrix&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), rows_(std::exchange(o.rows_, 0)), cols_(std::exchange(o.cols_, 0)) {}
  EmuMatrix& operator=(const EmuMatrix& o) {
    if (this != &o) {
      if (o.rows_ != rows_ || o.cols_ != cols_) allocate(o.rows_, o.cols_, Fill::none);
      copy_from_device(o);
    }
    return *this;
  }
  EmuMatrix& operator=(EmuMatrix&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      rows_ = std::exchange(o.rows_, 0);
      cols_ = std::exchange(o.cols_, 0);
    }
    return *this;
  }
  template <class Derived>
  EmuMatrix& operator=(const Eigen::MatrixBase<Derived>& host) {
    upload(host);
    return *this;
  }
  ~EmuMatrix() { release(); }

  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] Index size() const { return rows_ * cols_; }
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }
  /// The device pointer: not readable on the host (open it, or download).
  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] const T* data() const { return data_; }

  /// Reallocate to r × c (uninitialised) unless the shape already matches.
  void resize(Index r, Index c) {
    if (r != rows_ || c != cols_) allocate(r, c, Fill::garbage);
  }
  void set_zero() {
    const Open o(data_, bytes(), "EmuMatrix::set_zero");
    if (size()) std::memset(static_cast<void*>(data_), 0, bytes());
  }
  static EmuMatrix zeros(Index r, Index c) {
    EmuMatrix m;
    m.allocate(r, c, Fill::none);  // fresh anonymous pages are zero
    return m;
  }

  /// Download.
  [[nodiscard]] HostMatrix<T> host() const {
    HostMatrix<T> out(rows_, cols_);
    if (size()) copy_to_host(out.data());
    return out;
  }
  /// Bitwise equality of shape and contents (downloads both).
  friend bool operator==(const EmuMatrix& a, const EmuMatrix& b) {
    if (a.rows_ != b.rows_ || a.cols_ != b.cols_) return false;
    if (!a.size()) return true;
    const HostMatrix<T> x = a.host(), y = b.host();
    return std::memcmp(x.data(), y.data(), a.bytes()) == 0;
  }

  /// Raw contiguous copies of size() elements to and from host memory.
  void copy_to_host(T* dst) const {
    const Open o(data_, bytes(), "EmuMatrix::copy_to_host");
    if (size()) std::memcpy(static_cast<void*>(dst), data_, bytes());
  }
  void copy_from_host(const T* src) {
    const Open o(data_, bytes(), "EmuMatrix::copy_from_host");
    if (size()) std::memcpy(static_cast<void*>(data_), src, bytes());
  }

 private:
  enum class Fill { none, garbage };

  template <class Derived>
  void upload(const Eigen::MatrixBase<Derived>& host) {
    // Row-major evaluation of any expression or storage order, converted to T.
    const HostMatrix<T> h = host.template cast<T>();
    if (h.rows() != rows_ || h.cols() != cols_) allocate(h.rows(), h.cols(), Fill::none);
    if (size()) copy_from_host(h.data());
  }
  void copy_from_device(const EmuMatrix& o) {
    if (!size()) return;
    const Open src(o.data_, o.bytes(), "EmuMatrix copy (source)"), dst(data_, bytes(), "EmuMatrix copy");
    std::memcpy(static_cast<void*>(data_), o.data_, bytes());
  }
  void allocate(Index r, Index c, Fill fill) {
    if (r < 0 || c < 0) throw ShapeError(shardalg::detail::cat("EmuMatrix: negative shape ", r, "x", c));
    if (r > 0 && c > 0 && static_cast<std::size_t>(r) > SIZE_MAX / sizeof(T) / static_cast<std::size_t>(c))
      throw ShapeError(shardalg::detail::cat("EmuMatrix: ", r, "x", c, " elements of ", sizeof(T),
                                             " bytes overflow the address space"));
    release();
    if (r > 0 && c > 0)
      data_ = static_cast<T*>(device_allocate(static_cast<std::size_t>(r) * static_cast<std::size_t>(c) * sizeof(T)));
    rows_ = r;
    cols_ = c;
    if (fill == Fill::garbage && size()) {
      const Open o(data_, bytes(), "EmuMatrix (uninitialised fill)");
      std::memset(static_cast<void*>(data_), 0xFF, bytes());
    }
  }
  void release() noexcept {
    device_release(data_);
    data_ = nullptr;
    rows_ = cols_ = 0;
  }

  T* data_ = nullptr;
  Index rows_ = 0, cols_ = 0;
};

/// Download: emu → host matrix.
template <class T>
HostMatrix<T> to_host(const EmuMatrix<T>& d) {
  return d.host();
}
/// Upload: host matrix or expression → emu, converting to T.
template <class T, class Derived>
EmuMatrix<T> to_device(const Eigen::MatrixBase<Derived>& h) {
  return EmuMatrix<T>(h);
}

}  // namespace shardalg::emu
