// shardalg/cuda.hpp — the CUDA/NCCL backend, opt-in (never included by shardalg.hpp).
// Include it from a .cu translation unit and link shardalg::cuda:
//
//   #include "shardalg/shardalg.hpp"
//   #include "shardalg/cuda.hpp"
//   using shardalg::cuda::CudaBackend;
//   Sharded<float, ColSharded, CudaBackend> w = shard<ColSharded, Eigen::MatrixXf, CudaBackend>(W, g);
//
// Plain-C++ parts (usable from .cpp with the CUDA headers), in backend/cuda/: error.hpp, types.hpp,
// context.hpp, device_matrix.hpp, nccl.hpp; the simulated world's protocol is comm/sim_world.hpp.
// Needing nvcc: device_kernels.cuh, backend.hpp (CudaBackend), sim_comm.hpp, kernels.cuh
// (nn::Kernels<CudaBackend>: the nn layers on the GPU), fused.cuh (nn::Fused<CudaBackend>: the
// passes between the GEMMs); allocator.hpp is the device memory pool. See docs/cuda.md.
#pragma once

#include "shardalg/backend/cuda/error.hpp"
#include "shardalg/backend/cuda/types.hpp"
#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/device_matrix.hpp"
#include "shardalg/backend/cuda/nccl.hpp"
#include "shardalg/comm/sim_world.hpp"
#if defined(__CUDACC__)
#include "shardalg/backend/cuda/device_kernels.cuh"
#include "shardalg/backend/cuda/backend.hpp"
#include "shardalg/backend/cuda/sim_comm.hpp"
#include "shardalg/backend/cuda/kernels.cuh"
#include "shardalg/backend/cuda/fused.cuh"
#endif
