// CudaBackend, the backend policy over device memory, against CpuBackend (the reference), part
// one: DeviceMatrix transfers and copies, copy_block, pack/unpack of column blocks, fp32 GEMM in
// all four transposition forms on strided views with α/β accumulation, degenerate shapes and shape
// errors. Tolerances: backend_testing.hpp.
#include <doctest/doctest.h>

#include "backend_testing.hpp"

using namespace shardalg;
using namespace btest;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;

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


TEST_CASE("CudaBackend::gemm: degenerate shapes and shape errors") {
  DeviceMatrix<float> a = ctest::random_real<float>(3, 0, 1), b = ctest::random_real<float>(0, 4, 2);
  DeviceMatrix<float> c = ctest::random_real<float>(3, 4, 3);
  CudaBackend::gemm(1.0f, CudaBackend::view(a), CudaBackend::view(b), 0.0f, c);  // k = 0: C := 0
  CHECK(c.host() == Mat<float>::Zero(3, 4));
  DeviceMatrix<float> wrong(2, 2);
  CHECK_THROWS_AS(CudaBackend::gemm(1.0f, CudaBackend::view(c), CudaBackend::view(c), 0.0f, wrong), ShapeError);
}
