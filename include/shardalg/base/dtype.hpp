// shardalg/base/dtype.hpp — element types as runtime tags, for untyped communicator buffers.
//
// Host elements: float, double, int32, int64, and the 16-bit storage types Eigen::bfloat16 and
// Eigen::half (they store in 16 bits and compute in fp32: CpuBackend::gemm converts their blocks
// to float, comm/reduce.hpp adds them in fp32). The CUDA backend registers its own bf16 and fp16
// (backend/cuda/types.hpp) under the same tags. The bound_* tags are the running error bound's
// elements (precision/element.hpp): a program evaluated over them on the CPU and thread ranks
// carries, beside each exact value, a bound on the rounding error of the same program in f64,
// f32, bf16 or f16 storage.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardalg {

enum class DType { f32, f64, i32, i64, bf16, f16, bound_f64, bound_f32, bound_bf16, bound_f16 };

/// A running bound's element (precision::Running<F> or precision::Stored<S, F>): it moves and adds
/// on thread ranks (comm/thread.hpp); no MPI, NCCL or device collective takes it.
constexpr bool is_bound(DType t) {
  return t == DType::bound_f64 || t == DType::bound_f32 || t == DType::bound_bf16 || t == DType::bound_f16;
}

namespace detail {
template <class T>
constexpr DType no_dtype() {
  static_assert(sizeof(T) == 0, "shardalg: no DType for this element type; specialise shardalg::dtype_of");
  return DType::f32;
}
}  // namespace detail

/// The runtime tag of an element type. A backend that stores more types (the CUDA backend's
/// bf16 and fp16) specialises this and `is_element_v`; any other type is a compile error.
template <class T> inline constexpr DType dtype_of = detail::no_dtype<T>();
template <> inline constexpr DType dtype_of<float> = DType::f32;
template <> inline constexpr DType dtype_of<double> = DType::f64;
template <> inline constexpr DType dtype_of<std::int32_t> = DType::i32;
template <> inline constexpr DType dtype_of<std::int64_t> = DType::i64;
template <> inline constexpr DType dtype_of<Eigen::bfloat16> = DType::bf16;
template <> inline constexpr DType dtype_of<Eigen::half> = DType::f16;

/// The customisation point of `Element`: true for the types a Sharded tensor may hold.
template <class T> inline constexpr bool is_element_v = false;
template <> inline constexpr bool is_element_v<float> = true;
template <> inline constexpr bool is_element_v<double> = true;
template <> inline constexpr bool is_element_v<std::int32_t> = true;
template <> inline constexpr bool is_element_v<std::int64_t> = true;
template <> inline constexpr bool is_element_v<Eigen::bfloat16> = true;
template <> inline constexpr bool is_element_v<Eigen::half> = true;

/// The host's 16-bit storage types: stored in 16 bits, computed and accumulated in fp32.
template <class T>
concept HostHalf = std::same_as<T, Eigen::bfloat16> || std::same_as<T, Eigen::half>;

template <class T>
concept Element = is_element_v<T>;

/// The type an element computes in: float for the 16-bit storage types (and the running bound of
/// a 16-bit storage, precision/element.hpp), the type itself otherwise.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<Eigen::bfloat16> { using type = float; };
template <> struct compute_type<Eigen::half> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

/// Stored narrower than it computes: a CPU kernel converts the operands to compute_t<T> (exactly),
/// computes every sum and intermediate there, and rounds each output to T once.
template <class T>
concept NarrowStorage = !std::same_as<T, compute_t<T>>;

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::bound_f64:
    case DType::bound_f32:
    case DType::bound_bf16:
    case DType::bound_f16: return 32;  // a value and its bound's three fields (precision/running.hpp)
  }
  return 0;
}

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::bound_f64: return "bound<f64>";
    case DType::bound_f32: return "bound<f32>";
    case DType::bound_bf16: return "bound<bf16>";
    case DType::bound_f16: return "bound<f16>";
  }
  return "?";
}

/// Call `f.template operator()<T>()` with the C++ type of a host dtype (bf16 → Eigen::bfloat16,
/// f16 → Eigen::half).
template <class F>
decltype(auto) dispatch_host(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f.template operator()<double>();
    case DType::i32: return f.template operator()<std::int32_t>();
    case DType::i64: return f.template operator()<std::int64_t>();
    case DType::bf16: return f.template operator()<Eigen::bfloat16>();
    case DType::f16: return f.template operator()<Eigen::half>();
    case DType::f32: return f.template operator()<float>();
    case DType::bound_f64:
    case DType::bound_f32:
    case DType::bound_bf16:
    case DType::bound_f16: break;
  }
  if (is_bound(t))
    throw std::invalid_argument(std::string("shardalg: ") + std::string(to_string(t)) +
                                " (a running bound's element) is reduced by ThreadComm only");
  throw std::invalid_argument("shardalg: host collectives take f32, f64, i32, i64, bf16 or f16");
}

}  // namespace shardalg
