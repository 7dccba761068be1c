// CudaBackend, the backend policy over device memory, against CpuBackend (the reference):
// DeviceMatrix transfers and copies, copy_block, pack/unpack of column blocks, GEMM in all four
// transposition forms on strided views, α/β accumulation, fp64, integer and 16-bit storage,
// map/zip (device functors, extended lambdas, host fallback), col_sum, row_sum, add_row,
// softmax_rows.
//
// Tolerances. fp32: normwise relative ≤ 1e-5 against a double reference. bf16 storage (8
// significand bits, unit roundoff u = 2⁻⁸ ≈ 3.9e-3) with fp32 compute: the reference is computed
// in double from the *same bf16-rounded inputs*, so the error is the single rounding of each
// output to bf16 (≤ u·|y|) plus fp32 accumulation (≤ k·2⁻²⁴·Σ|a||b| ≤ 2⁻¹⁶·max|y|·(Σ|a||b|/max|y|)
// for k ≤ 256, and that ratio is ≤ 2⁸ for these sizes): at most 2u = 2⁻⁷ normwise. fp16 (11
// bits, u = 2⁻¹¹): 2⁻¹⁰ by the same argument.
#include <doctest/doctest.h>

#include "cuda_testing.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;

namespace {
constexpr double kF32 = 1e-5;
constexpr double kBf16 = 1.0 / 128;   // 2u, u = 2^-8
constexpr double kF16 = 1.0 / 1024;   // 2u, u = 2^-11

template <class T>
Mat<double> d(const Mat<T>& m) {
  return m.template cast<double>();
}
/// A host matrix rounded through 16-bit storage and back (the inputs the reference must use).
template <class H>
Mat<float> rounded(const Mat<float>& m) {
  return DeviceMatrix<H>(m).host();
}

}  // namespace

// Outside the anonymous namespace: nvcc warns about an unreferenced member of an internal type.
struct Twice {
  static constexpr bool device_callable = true;
  __host__ __device__ float operator()(float x) const { return 2.0f * x; }
};
struct HostOnlyPlusOne {  // no device_callable: takes the host round trip
  float operator()(float x) const { return x + 1.0f; }
};

TEST_CASE("DeviceMatrix: upload, download, deep copies, conversions") {
  const auto h = ctest::random_real<float>(5, 7, 1);
  DeviceMatrix<float> a = h;
  CHECK_EQ(a.rows(), 5);
  CHECK_EQ(a.cols(), 7);
  CHECK_EQ(a.size(), 35);
  CHECK(a.host() == h);
  DeviceMatrix<float> b = a;  // deep copy
  CHECK(b.data() != a.data());
  CHECK(b == a);
  b = DeviceMatrix<float>::zeros(5, 7);
  CHECK(b.host() == Mat<float>::Zero(5, 7));
  CHECK(a.host() == h);
  DeviceMatrix<float> c = std::move(a);
  CHECK(a.data() == nullptr);
  CHECK(c.host() == h);
  // Any Eigen expression and storage order uploads as row-major.
  Eigen::MatrixXf colmajor = h;
  DeviceMatrix<float> e = colmajor.transpose();
  CHECK(e.host() == Mat<float>(h.transpose()));
  // Integer and double round trips are exact; bf16 rounds to nearest even.
  const auto hi = ctest::random_int<std::int64_t>(3, 4, 2);
  CHECK(DeviceMatrix<std::int64_t>(hi).host() == hi);
  const auto hd = ctest::random_real<double>(3, 4, 3);
  CHECK(DeviceMatrix<double>(hd).host() == hd);
  const auto hb = DeviceMatrix<bf16>(h).host();
  CHECK(ctest::Mat<float>((hb - h).cwiseAbs()).maxCoeff() <= h.cwiseAbs().maxCoeff() / 256.0f);
  DeviceMatrix<float> empty(0, 3);
  CHECK_EQ(empty.host().size(), 0);
}

TEST_CASE("CudaBackend: copy_block, pack/unpack column blocks") {
  const auto h = ctest::random_int<float>(6, 12, 4);
  DeviceMatrix<float> x = h;
  CHECK(CudaBackend::copy_block(x, 1, 3, 4, 5).host() == CpuBackend::copy_block(h, 1, 3, 4, 5));
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    const auto packed = CudaBackend::pack_col_blocks(x, p);
    CHECK(packed.host() == CpuBackend::pack_col_blocks(h, p));
    CHECK(CudaBackend::unpack_col_blocks(packed, p).host() == h);
  }
  CHECK_THROWS_AS(CudaBackend::copy_block(x, 4, 0, 4, 1), ShapeError);
}

TEST_CASE("CudaBackend::gemm: four transposition forms, strided views, alpha/beta") {
  const Index m = 24, k = 40, n = 16;
  for (int form = 0; form < 4; ++form) {
    const bool ta = form & 1, tb = form & 2;
    CAPTURE(ta);
    CAPTURE(tb);
    // Store the operands inside wider matrices, then take column slices: strided views (ld > cols).
    const auto A = ctest::random_real<float>(ta ? k : m, (ta ? m : k) + 5, 10 + form);
    const auto B = ctest::random_real<float>(tb ? n : k, (tb ? k : n) + 3, 20 + form);
    const auto C0 = ctest::random_real<float>(m, n, 30 + form);
    DeviceMatrix<float> dA = A, dB = B, dC = C0;
    auto va = CudaBackend::view(dA, ta), vb = CudaBackend::view(dB, tb);
    auto ha = CpuBackend::view(A, ta), hb = CpuBackend::view(B, tb);
    va = ta ? va.slice_rows(2, m) : va.slice_cols(2, k);
    ha = ta ? ha.slice_rows(2, m) : ha.slice_cols(2, k);
    vb = tb ? vb.slice_rows(1, k) : vb.slice_cols(1, n);  // B[k × n]: Bᵀ's view is (k + 3) × n
    hb = tb ? hb.slice_rows(1, k) : hb.slice_cols(1, n);
    REQUIRE_EQ(va.rows, m);
    REQUIRE_EQ(va.cols, k);
    REQUIRE_EQ(vb.rows, k);
    REQUIRE_EQ(vb.cols, n);
    Mat<float> ref = C0;
    CpuBackend::gemm(0.5f, ha, hb, -2.0f, ref);
    CudaBackend::gemm(0.5f, va, vb, -2.0f, dC);
    const auto err = compare(dC.host(), ref);
    INFO(err);
    CHECK(err.within(kF32));
    DeviceMatrix<float> dz(m, n);
    CudaBackend::gemm(1.0f, va, vb, 0.0f, dz);  // β = 0 ignores the (uninitialised) output
    Mat<float> z(m, n);
    CpuBackend::gemm(1.0f, ha, hb, 0.0f, z);
    CHECK(compare(dz.host(), z).within(kF32));
  }
}

TEST_CASE("CudaBackend::gemm: fp64, int32 (exact kernel), bf16 and fp16 storage with fp32 accumulation") {
  const Index m = 32, k = 64, n = 48;
  {
    const auto A = ctest::random_real<double>(m, k, 1), B = ctest::random_real<double>(k, n, 2);
    DeviceMatrix<double> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0, CudaBackend::view(dA), CudaBackend::view(dB), 0.0, dC);
    CHECK(compare(dC.host(), Mat<double>(A * B)).within(1e-12));
  }
  {
    const auto A = ctest::random_int<std::int32_t>(m, k, 3), B = ctest::random_int<std::int32_t>(n, k, 4);
    DeviceMatrix<std::int32_t> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1, CudaBackend::view(dA), CudaBackend::view(dB, true), 0, dC);
    CHECK(dC.host() == Mat<std::int32_t>(A * B.transpose()));
  }
  {
    const auto A = rounded<bf16>(ctest::random_real<float>(m, k, 5)), B = rounded<bf16>(ctest::random_real<float>(k, n, 6));
    DeviceMatrix<bf16> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0f, CudaBackend::view(dA, false), CudaBackend::view(dB), 0.0f, dC);
    const auto err = compare(d(dC.host()), Mat<double>(d(A) * d(B)));
    INFO("bf16 GEMM: ", err, " (bound 2^-7)");
    CHECK(err.within(kBf16));
  }
  {
    const auto A = rounded<cuda::f16>(ctest::random_real<float>(k, m, 7)), B = rounded<cuda::f16>(ctest::random_real<float>(k, n, 8));
    DeviceMatrix<cuda::f16> dA = A, dB = B, dC(m, n);
    CudaBackend::gemm(1.0f, CudaBackend::view(dA, true), CudaBackend::view(dB), 0.0f, dC);
    const auto err = compare(d(dC.host()), Mat<double>(d(A).transpose() * d(B)));
    INFO("fp16 GEMM: ", err, " (bound 2^-10)");
    CHECK(err.within(kF16));
  }
}

TEST_CASE("CudaBackend::gemm: degenerate shapes and shape errors") {
  DeviceMatrix<float> a = ctest::random_real<float>(3, 0, 1), b = ctest::random_real<float>(0, 4, 2);
  DeviceMatrix<float> c = ctest::random_real<float>(3, 4, 3);
  CudaBackend::gemm(1.0f, CudaBackend::view(a), CudaBackend::view(b), 0.0f, c);  // k = 0: C := 0
  CHECK(c.host() == Mat<float>::Zero(3, 4));
  DeviceMatrix<float> wrong(2, 2);
  CHECK_THROWS_AS(CudaBackend::gemm(1.0f, CudaBackend::view(c), CudaBackend::view(c), 0.0f, wrong), ShapeError);
}

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
