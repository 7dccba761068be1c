// NcclComm on the GPU: a one-rank NCCL communicator (real NCCL calls; NCCL refuses two ranks on
// one GPU) used as the group of Sharded tensors, driving the same laws as the simulated one; its
// iall_reduce on the side stream; with ≥ 2 GPUs, one rank per GPU.
#include <doctest/doctest.h>

#include <thread>

#include "cuda_testing.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using cuda::CudaBackend;
using cuda::DeviceMatrix;

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
