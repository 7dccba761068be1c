// shardalg/backend/cuda/device_matrix.hpp — DeviceMatrix<T>: a row-major rows × cols block in device
// memory (stream-ordered, from the device's pool: allocator.hpp; no managed memory), owning and
// deep-copying, with the members the core reads from a backend's matrix (rows, cols, size, data).
//
//   DeviceMatrix<float> d = host;             // upload an Eigen matrix or expression (any storage order)
//   CpuBackend::matrix<float> h = to_host(d); // download (blocks until the copy is done)
//
// Every copy is ordered on the current context's stream (context.hpp). Uploads from Eigen
// expressions are what lets the core's `shard<L, Derived, CudaBackend>(dense, g)` run unchanged.
// 16-bit matrices upload from / download to float on the host (round to nearest even).
//
// Plain C++ (host compiler + CUDA runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cuda/allocator.hpp"
#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda {

/// The host matrix a device matrix of T converts to: T itself for the core's element types,
/// float for the 16-bit storage types.
template <class T>
using host_scalar_t = std::conditional_t<HalfElement<T>, float, T>;
template <class T>
using HostMatrix = CpuBackend::matrix<host_scalar_t<T>>;

template <CudaElement T>
class DeviceMatrix {
 public:
  using value_type = T;
  using Scalar = T;

  DeviceMatrix() = default;
  /// Uninitialised r × c (device memory is not cleared; see zeros()).
  DeviceMatrix(Index r, Index c) { allocate(r, c); }
  /// Upload a host matrix or Eigen expression.
  template <class Derived>
  DeviceMatrix(const Eigen::MatrixBase<Derived>& host) {  // NOLINT: implicit, like Eigen's own
    upload(host);
  }

  DeviceMatrix(const DeviceMatrix& o) : DeviceMatrix(o.rows_, o.cols_) {
    if (size()) SHARDALG_CUDA_CHECK(cudaMemcpyAsync(data_, o.data_, bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  }
  DeviceMatrix(DeviceMatrix&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        rows_(std::exchange(o.rows_, 0)),
        cols_(std::exchange(o.cols_, 0)),
        stream_(std::exchange(o.stream_, nullptr)) {}
  DeviceMatrix& operator=(const DeviceMatrix& o) {
    if (this != &o) {
      if (o.rows_ != rows_ || o.cols_ != cols_) allocate(o.rows_, o.cols_);
      if (size())
        SHARDALG_CUDA_CHECK(cudaMemcpyAsync(data_, o.data_, bytes(), cudaMemcpyDeviceToDevice, current_stream()));
    }
    return *this;
  }
  DeviceMatrix& operator=(DeviceMatrix&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      rows_ = std::exchange(o.rows_, 0);
      cols_ = std::exchange(o.cols_, 0);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  template <class Derived>
  DeviceMatrix& operator=(const Eigen::MatrixBase<Derived>& host) {
    upload(host);
    return *this;
  }
  ~DeviceMatrix() { release(); }

  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] Index size() const { return rows_ * cols_; }
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }
  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] const T* data() const { return data_; }

  /// Reallocate to r × c (contents undefined) unless the shape already matches.
  void resize(Index r, Index c) {
    if (r != rows_ || c != cols_) allocate(r, c);
  }
  /// Set every byte to zero (asynchronously, on the current stream).
  void set_zero() {
    if (size()) SHARDALG_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), current_stream()));
  }
  static DeviceMatrix zeros(Index r, Index c) {
    DeviceMatrix m(r, c);
    m.set_zero();
    return m;
  }

  /// Download to the host (synchronises the current stream).
  [[nodiscard]] HostMatrix<T> host() const {
    HostMatrix<T> out(rows_, cols_);
    if (!size()) return out;
    if constexpr (HalfElement<T>) {
      std::vector<T> tmp(static_cast<std::size_t>(size()));
      copy_to_host(tmp.data());
      for (Index i = 0; i < size(); ++i) out.data()[i] = to_compute(tmp[static_cast<std::size_t>(i)]);
    } else {
      copy_to_host(out.data());
    }
    return out;
  }

  /// Bitwise equality of shape and contents (downloads both; for replica checks and tests).
  friend bool operator==(const DeviceMatrix& a, const DeviceMatrix& b) {
    if (a.rows_ != b.rows_ || a.cols_ != b.cols_) return false;
    if (!a.size()) return true;
    std::vector<T> x(static_cast<std::size_t>(a.size())), y(x.size());
    a.copy_to_host(x.data());
    b.copy_to_host(y.data());
    return std::memcmp(x.data(), y.data(), a.bytes()) == 0;
  }

  /// Raw contiguous copies (element count = size()); synchronous with respect to the host.
  void copy_to_host(T* dst) const {
    SHARDALG_CUDA_CHECK(cudaMemcpyAsync(dst, data_, bytes(), cudaMemcpyDeviceToHost, current_stream()));
    current().synchronize();
  }
  void copy_from_host(const T* src) {
    SHARDALG_CUDA_CHECK(cudaMemcpyAsync(data_, src, bytes(), cudaMemcpyHostToDevice, current_stream()));
    current().synchronize();  // src may be a temporary of the caller
  }

 private:
  template <class Derived>
  void upload(const Eigen::MatrixBase<Derived>& host) {
    const Index r = host.rows(), c = host.cols();
    resize(r, c);
    if (!size()) return;
    using S = typename Derived::Scalar;
    if constexpr (HalfElement<T>) {
      const CpuBackend::matrix<float> h = host.template cast<float>();
      std::vector<T> tmp(static_cast<std::size_t>(size()));
      for (Index i = 0; i < size(); ++i) tmp[static_cast<std::size_t>(i)] = from_compute<T>(h.data()[i]);
      copy_from_host(tmp.data());
    } else if constexpr (std::is_same_v<S, T>) {
      const CpuBackend::matrix<T> h = host;  // row-major evaluation of any expression / storage order
      copy_from_host(h.data());
    } else {
      const CpuBackend::matrix<T> h = host.template cast<T>();
      copy_from_host(h.data());
    }
  }
  void allocate(Index r, Index c) {
    release();
    if (r < 0 || c < 0) throw ShapeError(shardalg::detail::cat("DeviceMatrix: negative shape ", r, "x", c));
    rows_ = r;
    cols_ = c;
    if (size()) {
      stream_ = current_stream();
      data_ = static_cast<T*>(device_allocate(bytes(), stream_));
    }
  }
  void release() noexcept {
    // Back to the pool on the stream it was allocated on (or after a device synchronisation when
    // another thread frees it): allocator.hpp says why that is ordered after every use.
    if (data_) device_free(data_, stream_, current_stream_if_any());
    data_ = nullptr;
    stream_ = nullptr;
    rows_ = cols_ = 0;
  }

  T* data_ = nullptr;
  Index rows_ = 0, cols_ = 0;
  cudaStream_t stream_ = nullptr;  // the stream the block was allocated on
};

/// Download: device → host matrix (float for 16-bit storage).
template <class T>
HostMatrix<T> to_host(const DeviceMatrix<T>& d) {
  return d.host();
}
/// Upload: host matrix or expression → device, converting to T.
template <CudaElement T, class Derived>
DeviceMatrix<T> to_device(const Eigen::MatrixBase<Derived>& h) {
  return DeviceMatrix<T>(h);
}

}  // namespace shardalg::cuda
