// shardalg/emu.hpp — the emulated-device backend, opt-in (never included by shardalg.hpp): device
// memory on the CPU that the host cannot read outside the backend's entry points, so that a host
// dereference of a device pointer in the core or the layers is a crash that names the allocation,
// in CI, with no GPU (docs/emu.md).
//
//   #include "shardalg/nn.hpp"
//   #include "shardalg/emu.hpp"
//   using shardalg::emu::EmuBackend;
//   emu::run_emu_ranks(2, [&](emu::EmuComm& c) {
//     auto w = shard<ColSharded, Eigen::MatrixXf, EmuBackend>(W, Group(c));
//   });
//
// POSIX (mmap, mprotect, sigaction); header-only like the rest.
#pragma once

#include "shardalg/backend/emu/registry.hpp"
#include "shardalg/backend/emu/fault.hpp"
#include "shardalg/backend/emu/device_matrix.hpp"
#include "shardalg/backend/emu/backend.hpp"
#include "shardalg/backend/emu/kernels.hpp"
#include "shardalg/backend/emu/sim_comm.hpp"
