// shardalg/backend/emu/sim_comm.hpp — the simulated multi-rank world on emulated device memory.
//
//   run_emu_ranks(4, [&](EmuComm& comm) {       // 4 host threads, like run_device_ranks
//     Group g = comm;
//     auto w = shard<ColSharded, Eigen::MatrixXf, EmuBackend>(W, g);
//     auto z = all_reduce(matmul(matmul(x, w), w2));  // the copies and sums open the blocks they touch
//   });
//
// EmuComm is SimComm<EmuSimOps>: ThreadComm's protocol exactly (comm/sim_world.hpp), with the data
// movement of CudaSimOps (backend/cuda/sim_comm.hpp) — a reduction into the first destination,
// then copies; every message staged in device memory — on emu allocations. A copy or reduction
// looks each buffer up in the registry by address: an emu buffer is opened for the call (and its
// range checked against its allocation, an EmuError if it runs past), a host buffer — the int
// that replicas_agree all-reduces, a distribute's host matrix — is used as it is, as CudaSimOps
// treats host pointers under unified addressing.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "shardalg/backend/emu/fault.hpp"
#include "shardalg/backend/emu/registry.hpp"
#include "shardalg/comm/sim_world.hpp"

namespace shardalg::emu {

/// Data movement of a simulated rank on emulated device memory.
struct EmuSimOps {
  static constexpr std::string_view name = "SimComm";

  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0 || dst == src) return;
    const Open s = Open::if_emu(src, bytes, "SimComm copy (source)"), d = Open::if_emu(dst, bytes, "SimComm copy");
    std::memmove(dst, src, bytes);
  }
  /// dst(k)[i] := src(0)[i] ⊕ … for every k (HostSimOps' arithmetic and order) with every buffer open.
  template <class Dst, class Src>
  void reduce(int ndst, Dst&& dst, int nsrc, Src&& src, std::size_t n, DType t, ReduceOp op) {
    const std::size_t bytes = n * size_of(t);
    std::vector<Open> open;
    open.reserve(static_cast<std::size_t>(ndst + nsrc));
    for (int s = 0; s < nsrc; ++s) open.push_back(Open::if_emu(src(s), bytes, "SimComm reduce (source)"));
    for (int k = 0; k < ndst; ++k) open.push_back(Open::if_emu(dst(k), bytes, "SimComm reduce"));
    HostSimOps{}.reduce(ndst, dst, nsrc, src, n, t, op);
  }
  void fence() {}
  /// A message's buffer: device memory, as CudaSimOps' cudaMalloc.
  void* stage(std::size_t bytes) { return device_allocate(bytes ? bytes : 1); }
  static void release(void* p) { device_release(p); }
};

using EmuComm = SimComm<EmuSimOps>;
static_assert(Communicator<EmuComm>);

/// Run fn(EmuComm&) on n threads (ranks 0..n−1), as run_device_ranks does on one GPU; rethrows
/// the first rank's own exception. Groups made from `comm` must not outlive fn.
template <class Fn>
void run_emu_ranks(int n, Fn&& fn) {
  run_sim_ranks<EmuSimOps>(
      n, [](int) { return std::tuple{std::make_shared<EmuSimOps>(), 0}; }, std::forward<Fn>(fn));
}

}  // namespace shardalg::emu
