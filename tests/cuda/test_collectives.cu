// The communicators on the GPU.
//  * SimDeviceComm (one GPU, ranks as threads with their own streams): raw collectives on device
//    buffers for f32, i32, bf16 (ragged sizes), host-buffer reductions, send/recv; every layout
//    redistribution against dense and the all_gather/reduce_scatter adjoint law, TP 1/2/4.
//  * NcclComm: a one-rank NCCL communicator (real NCCL calls; NCCL refuses two ranks on one
//    GPU), used as the group of Sharded tensors; with ≥ 2 GPUs, one rank per GPU.
#include <doctest/doctest.h>

#include <thread>

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

TEST_CASE("nccl: one-rank communicator drives the core's algebra") {
  cuda::NcclComm nc = cuda::NcclComm::single();
  CHECK_EQ(nc.size(), 1);
  CHECK_EQ(nc.rank(), 0);
  Group g = nc;
  auto res = ctest::collective_laws<CudaBackend, float>(g, 4, 6, 3);
  auto mm = ctest::matmul_laws<CudaBackend, float>(g, 4, 6, 8, 5);
  res.insert(res.end(), mm.begin(), mm.end());
  for (const auto& o : res) {
    INFO(o.what, ": ", o.err);
    CHECK(o.ok);
    CHECK_EQ(o.err.max_abs, 0.0);
  }
  // all_to_all is grouped send/recv; with one rank it is a copy.
  DeviceMatrix<float> a = ctest::random_int<float>(2, 3, 1), b(2, 3);
  nc.all_to_all(a.data(), b.data(), 6, DType::f32);
  CHECK(b == a);
  nc.barrier();
}

TEST_CASE("nccl: iall_reduce on the side stream, ordered before the main stream's later work") {
  cuda::NcclComm nc = cuda::NcclComm::single();
  Group g = nc;
  CHECK(g.async_all_reduce());
  DeviceMatrix<float> a = ctest::random_int<float>(64, 33, 7);
  const auto before = a.host();
  Request r = g.iall_reduce(a.data(), 64 * 33, DType::f32, ReduceOp::sum);
  r.wait();  // the main stream now waits for the side stream
  CHECK(a.host() == before);  // P = 1: the sum is the buffer itself; read after the wait
  // The overlapped column-parallel backward's schedule at P = 1 through the PendingAllReduce.
  auto pending = all_reduce_start(Sharded<float, Partial, CudaBackend>(DeviceMatrix<float>(a), 64, 33, g));
  while (!pending.test()) {
  }
  const auto z = std::move(pending).wait();
  CHECK(z.local().host() == before);
}

TEST_CASE("nccl: one rank per GPU when there are several") {
  const int ndev = cuda::probe_devices().count;
  if (ndev < 2) {
    MESSAGE("skipped: needs 2 GPUs, found ", ndev, " (TP > 1 on one GPU is covered by the simulated communicator)");
    return;
  }
  const int P = std::min(ndev, 4);
  const ncclUniqueId id = cuda::NcclComm::unique_id();
  ctest::Outcomes res;
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r)
    ts.emplace_back([&, r] {
      SHARDALG_CUDA_CHECK(cudaSetDevice(r));
      cuda::Context ctx(r);
      cuda::ContextScope scope(ctx);
      auto nc = cuda::NcclComm::init_rank(id, P, r);
      res.add(ctest::collective_laws<CudaBackend, float>(Group(nc), 4 * P, 2 * P, 4));
      res.add(ctest::matmul_laws<CudaBackend, float>(Group(nc), 4 * P, 2 * P, 2 * P, 8));
      // iall_reduce: rank r contributes r + 1 everywhere; the sum is P(P+1)/2.
      DeviceMatrix<float> v(ctest::Mat<float>(ctest::Mat<float>::Constant(16, 16, float(r + 1))));
      Group(nc).iall_reduce(v.data(), 256, DType::f32, ReduceOp::sum).wait();
      const ctest::Mat<float> got = v.host();
      ErrorReport e;
      e.max_abs = (got.array() - float(P * (P + 1) / 2)).abs().maxCoeff();
      res.add({ctest::Outcome{"nccl iall_reduce", e, e.max_abs == 0.0}});
    });
  for (auto& t : ts) t.join();
  for (const auto& o : res.all) {
    INFO(o.what, ": ", o.err);
    CHECK(o.ok);
    CHECK_EQ(o.err.max_abs, 0.0);
  }
}
