// The simulated communicator on the GPU: SimDeviceComm (one GPU, ranks as threads with their own
// streams): raw collectives on device buffers for f32, i32, bf16 (ragged sizes), host-buffer
// reductions, send/recv; every layout redistribution against dense and the all_gather /
// reduce_scatter adjoint law, TP 1/2/4; the ledger's counts. NCCL is in test_nccl.cu (the two
// were one file of 1.2 GB in cicc).
#include <doctest/doctest.h>

#include "cuda_testing.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using cuda::SimDeviceComm;

TEST_CASE("cuda sim: raw collectives on device buffers") {
  for (int P : {1, 2, 4}) {
    CAPTURE(P);
    const Index n = 10;  // ragged for P = 4
    std::vector<ctest::Mat<float>> ar(P), ag(P), rs(P), a2a(P), bc(P), ring(P), bfar(P);
    std::vector<ctest::Mat<std::int32_t>> imax(P);
    std::vector<int> flag(P);
    cuda::run_device_ranks(P, [&](SimDeviceComm& c) {
      const int r = c.rank();
      const auto x = ctest::random_int<float>(1, n, 10 + r);
      DeviceMatrix<float> d = x;
      c.all_reduce(d.data(), n, DType::f32, ReduceOp::sum);
      ar[r] = d.host();
      DeviceMatrix<std::int32_t> di = ctest::random_int<std::int32_t>(1, n, 20 + r);
      c.all_reduce(di.data(), n, DType::i32, ReduceOp::max);
      imax[r] = di.host();
      DeviceMatrix<cuda::bf16> db = x;
      c.all_reduce(db.data(), n, DType::bf16, ReduceOp::sum);
      bfar[r] = db.host();
      DeviceMatrix<float> src = x, g(P, n);
      c.all_gather(src.data(), g.data(), n, DType::f32);
      ag[r] = g.host();
      DeviceMatrix<float> big = ctest::random_int<float>(P, n, 30 + r), out(1, n);
      c.reduce_scatter(big.data(), out.data(), n, DType::f32, ReduceOp::sum);
      rs[r] = out.host();
      DeviceMatrix<float> recv(P, n);
      c.all_to_all(big.data(), recv.data(), n, DType::f32);
      a2a[r] = recv.host();
      DeviceMatrix<float> b = x;
      c.broadcast(b.data(), n, DType::f32, P - 1);
      bc[r] = b.host();
      if (P > 1) {
        DeviceMatrix<float> got(1, n);
        c.send(src.data(), n, DType::f32, (r + 1) % P);
        c.recv(got.data(), n, DType::f32, (r + P - 1) % P);
        ring[r] = got.host();
      }
      int f = r;  // a host buffer (what the core's replicas_agree reduces)
      c.all_reduce(&f, 1, DType::i32, ReduceOp::max);
      flag[r] = f;
    });
    ctest::Mat<float> sum = ctest::Mat<float>::Zero(1, n);
    ctest::Mat<std::int32_t> mx = ctest::random_int<std::int32_t>(1, n, 20);
    for (int s = 0; s < P; ++s) {
      sum += ctest::random_int<float>(1, n, 10 + s);
      mx = mx.cwiseMax(ctest::random_int<std::int32_t>(1, n, 20 + s));
    }
    for (int r = 0; r < P; ++r) {
      CHECK(ar[r] == sum);
      CHECK(imax[r] == mx);
      CHECK(bfar[r] == sum);  // small integers: exact in bf16 too
      CHECK_EQ(flag[r], P - 1);
      CHECK(bc[r] == ctest::random_int<float>(1, n, 10 + P - 1));
      ctest::Mat<float> rsum = ctest::Mat<float>::Zero(1, n);
      for (int s = 0; s < P; ++s) {
        CHECK(ctest::Mat<float>(ag[r].row(s)) == ctest::random_int<float>(1, n, 10 + s));
        CHECK(ctest::Mat<float>(a2a[r].row(s)) == ctest::Mat<float>(ctest::random_int<float>(P, n, 30 + s).row(r)));
        rsum += ctest::random_int<float>(P, n, 30 + s).row(r);
      }
      CHECK(rs[r] == rsum);
      if (P > 1) CHECK(ring[r] == ctest::random_int<float>(1, n, 10 + (r + P - 1) % P));
    }
  }
}

TEST_CASE("cuda sim: every redistribution against dense, TP 1/2/4") {
  for (int P : {1, 2, 4}) {
    ctest::Outcomes res;
    cuda::run_device_ranks(P, [&](SimDeviceComm& c) { res.add(ctest::collective_laws<CudaBackend, float>(Group(c), 4 * P, 3 * P, 9)); });
    for (const auto& o : res.all) {
      INFO(o.what, ": ", o.err);
      CHECK(o.ok);
      CHECK_EQ(o.err.max_abs, 0.0);
    }
  }
}

TEST_CASE("cuda sim: the ledger counts device collectives like host ones") {
  std::vector<std::size_t> counts(2);
  cuda::run_device_ranks(2, [&](SimDeviceComm& c) {
    Ledger ledger;
    Group g = ledgered(c, ledger);
    auto z = ctest::make_operand<Partial, float, CudaBackend>(g, 4, 6, 3);
    auto s = ledger.scope("attn.fwd");
    auto y = all_reduce(z);
    counts[c.rank()] = ledger.count(CollectiveKind::all_reduce, "attn.fwd");
  });
  CHECK_EQ(counts[0], 1u);
  CHECK_EQ(counts[1], 1u);
}
