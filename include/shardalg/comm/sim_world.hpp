// shardalg/comm/sim_world.hpp — the thread world's protocol (comm/thread.hpp) with the data
// movement of another device: SimComm<Ops> is BasicThreadComm<Ops>, so the simulated world has
// ThreadComm's bookkeeping exactly — the rendezvous, checked mode and its watchdog, the structural
// check, posting-order receives, split — and only the copies and reductions are the device's.
//
//   SimComm<CudaSimOps>   ranks are host threads sharing one GPU, each with its own stream;
//                         collectives are device-to-device copies and a rank-ordered reduction
//                         kernel (backend/cuda/sim_comm.hpp). NCCL refuses two ranks on one GPU;
//                         this does not, so TP = 2 and 4 run on a single device.
//   SimComm<HostSimOps>   the same on host memory, written as a device's ops are (a reduction into
//                         one destination, then copies; every message staged): the protocol a
//                         device runs, checked in CI against the core's algebra with no GPU.
//
// A fence before every rendezvous orders the ranks' queues. Reductions combine in rank order
// 0, 1, …, P−1, so replicas are bit-identical.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <tuple>
#include <utility>

#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/comm/thread.hpp"

namespace shardalg {

template <class Ops>
using SimComm = BasicThreadComm<Ops>;

/// Host memory moved as a device moves it: reduce into the first destination, then copy it to
/// the others (CudaSimOps' order of work).
struct HostSimOps {
  static constexpr std::string_view name = "SimComm";
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  template <class Dst, class Src>
  void reduce(int ndst, Dst&& dst, int nsrc, Src&& src, std::size_t n, DType t, ReduceOp op) {
    dispatch_host(t, [&]<class T>() {
      auto* out = static_cast<T*>(dst(0));
      for (std::size_t i = 0; i < n; ++i) {
        T v = static_cast<const T*>(src(0))[i];
        for (int s = 1; s < nsrc; ++s) {
          const T w = static_cast<const T*>(src(s))[i];
          v = op == ReduceOp::max ? (v < w ? w : v) : op == ReduceOp::min ? (w < v ? w : v) : static_cast<T>(v + w);
        }
        out[i] = v;
      }
    });
    for (int k = 1; k < ndst; ++k) copy(dst(k), dst(0), n * size_of(t));
  }
  void fence() {}
  void* stage(std::size_t bytes) { return ::operator new(bytes ? bytes : 1); }
  static void release(void* p) { ::operator delete(p); }
};

/// Run fn(SimComm<Ops>&) on n threads (ranks 0..n−1); `setup(rank)` runs first on each rank's
/// thread and returns that rank's Ops (as shared_ptr) plus anything to keep alive for the body
/// (e.g. a CUDA context). Rethrows the first rank's own exception, like run_ranks.
template <class Ops, class Setup, class Fn>
void run_sim_ranks(int n, Setup&& setup, Fn&& fn) {
  if (n < 1) throw CommError(detail::cat("run_sim_ranks: world size ", n, " must be at least 1"));
  auto world = std::make_shared<detail::ThreadWorld>(n, Ops::name, &Ops::release);
  detail::run_threads(
      n,
      [&](int r) {
        auto env = setup(r);  // {std::shared_ptr<Ops>, keep-alive}
        SimComm<Ops> comm(world, r, std::get<0>(env));
        fn(comm);
        comm.end_of_body();
        comm.ops().fence();
      },
      [&] { world->abort(); });
}

/// The host-memory simulated world.
template <class Fn>
void run_host_sim_ranks(int n, Fn&& fn) {
  run_sim_ranks<HostSimOps>(
      n, [](int) { return std::tuple{std::make_shared<HostSimOps>(), 0}; }, std::forward<Fn>(fn));
}

static_assert(Communicator<SimComm<HostSimOps>> && VariableAllToAll<SimComm<HostSimOps>> &&
              AsyncPointToPoint<SimComm<HostSimOps>>);

namespace cuda {  // the names the CUDA backend and its tests use
using shardalg::HostSimOps;
using shardalg::run_host_sim_ranks;
using shardalg::run_sim_ranks;
using shardalg::SimComm;
}  // namespace cuda

}  // namespace shardalg
