// CudaBackend's elementwise and row/column operations against CpuBackend: map and zip (device
// functors, extended lambdas, the host fallback), col_sum, row_sum, add_row, softmax_rows in fp32
// and bf16, and the core's operators (+, −, α·, ⊙, add_bias, row_sum) on Sharded CUDA tensors.
// Tolerances: backend_testing.hpp.
#include <doctest/doctest.h>

#include "backend_testing.hpp"

using namespace shardalg;
using namespace btest;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;

// Outside the anonymous namespace: nvcc warns about an unreferenced member of an internal type.
struct Twice {
  static constexpr bool device_callable = true;
  __host__ __device__ float operator()(float x) const { return 2.0f * x; }
};
struct HostOnlyPlusOne {  // no device_callable: takes the host round trip
  float operator()(float x) const { return x + 1.0f; }
};

TEST_CASE("CudaBackend: map and zip — device functors, extended lambdas, host fallback") {
  static_assert(cuda::is_device_callable_v<Twice>);
  static_assert(!cuda::is_device_callable_v<HostOnlyPlusOne>);
  const auto h = ctest::random_real<float>(7, 9, 5);
  DeviceMatrix<float> x = h;
  CHECK(CudaBackend::map(x, Twice{}).host() == Mat<float>(2.0f * h));
  CHECK(CudaBackend::map(x, HostOnlyPlusOne{}).host() == Mat<float>(h.array() + 1.0f));
  auto dev_lambda = [] __device__(float v) { return v * v; };
  static_assert(cuda::is_device_callable_v<decltype(dev_lambda)>);
  CHECK(compare(CudaBackend::map(x, dev_lambda).host(), Mat<float>(h.array().square())).within(kF32));
  const auto h2 = ctest::random_real<float>(7, 9, 6);
  DeviceMatrix<float> y = h2;
  CHECK(CudaBackend::zip(x, y, [] __host__ __device__(float a, float b) { return a - b; }).host() == Mat<float>(h - h2));
  // The core's operators use plain host lambdas: they run through the fallback, correctly.
  CHECK(CudaBackend::zip(x, y, [](float a, float b) { return a * b; }).host() == Mat<float>(h.cwiseProduct(h2)));
}

TEST_CASE("CudaBackend: col_sum, row_sum, add_row, softmax_rows against CpuBackend") {
  for (auto [r, c] : {std::pair<Index, Index>{1, 1}, {3, 700}, {65, 33}, {300, 1}}) {
    CAPTURE(r);
    CAPTURE(c);
    const auto h = ctest::random_real<float>(r, c, 9);
    const auto b = ctest::random_real<float>(1, c, 10);
    DeviceMatrix<float> x = h, db = b;
    CHECK(compare(CudaBackend::col_sum(x).host(), CpuBackend::col_sum(h)).within(kF32));
    CHECK(compare(CudaBackend::row_sum(x).host(), CpuBackend::row_sum(h)).within(kF32));
    CHECK(CudaBackend::add_row(x, db).host() == CpuBackend::add_row(h, b));
    CHECK(compare(CudaBackend::softmax_rows(x).host(), CpuBackend::softmax_rows(h)).within(kF32));
    // bf16 storage: the same operations within 2u of the reference on the rounded inputs.
    const auto hr = rounded<bf16>(h);
    DeviceMatrix<bf16> xb = hr;
    CHECK(compare(CudaBackend::softmax_rows(xb).host(), CpuBackend::softmax_rows(hr)).within(kBf16));
    CHECK(compare(CudaBackend::col_sum(xb).host(), CpuBackend::col_sum(hr)).within(kBf16));
    CHECK(compare(CudaBackend::row_sum(xb).host(), CpuBackend::row_sum(hr)).within(kBf16));
  }
  const auto hi = ctest::random_int<std::int64_t>(9, 5, 11);
  DeviceMatrix<std::int64_t> xi = hi;
  CHECK(CudaBackend::col_sum(xi).host() == CpuBackend::col_sum(hi));
  CHECK(CudaBackend::row_sum(xi).host() == CpuBackend::row_sum(hi));
}

TEST_CASE("CudaBackend through the core: elementwise operators on Sharded tensors") {
  std::vector<int> ok(2, 0);
  cuda::run_device_ranks(2, [&](cuda::SimDeviceComm& c) {
    Group g = c;
    const auto A = ctest::random_int<float>(4, 6, 1), B = ctest::random_int<float>(4, 6, 2), bias = ctest::random_int<float>(1, 6, 3);
    auto a = shard<ColSharded, Mat<float>, CudaBackend>(A, g);
    auto b = shard<ColSharded, Mat<float>, CudaBackend>(B, g);
    auto bb = shard<ColSharded, Mat<float>, CudaBackend>(bias, g);
    const Mat<float> s = ctest::host_of(to_dense(a + b)), dd = ctest::host_of(to_dense(a - b)),
                     sc = ctest::host_of(to_dense(3.0f * a)), hd = ctest::host_of(to_dense(hadamard(a, b))),
                     ab = ctest::host_of(to_dense(add_bias(a, bb))), cs = ctest::host_of(to_dense(all_reduce(row_sum(a))));
    ok[c.rank()] = s == A + B && dd == A - B && sc == 3.0f * A && hd == A.cwiseProduct(B) &&
                   ab == Mat<float>(A.rowwise() + bias.row(0)) && cs == Mat<float>(A.rowwise().sum());
  });
  CHECK_EQ(ok[0], 1);
  CHECK_EQ(ok[1], 1);
}
