// shardalg/cuda/cuda.hpp — the CUDA/NCCL backend, opt-in (never included by shardalg.hpp).
// Include it from a .cu translation unit and link shardalg::cuda:
//
//   #include "shardalg/shardalg.hpp"
//   #include "shardalg/cuda/cuda.hpp"
//   using shardalg::cuda::CudaBackend;
//   Sharded<float, ColSharded, CudaBackend> w = shard<ColSharded, Eigen::MatrixXf, CudaBackend>(W, g);
//
// Plain-C++ parts (usable from .cpp with the CUDA headers): error.hpp, types.hpp, context.hpp,
// device_matrix.hpp, nccl.hpp, sim_world.hpp, random.hpp. Needing nvcc: kernels.cuh, backend.hpp,
// ops.hpp, sim_comm.hpp, nn_kernels.cuh (nn::Kernels<CudaBackend>: the nn layers on the GPU).
// See docs/cuda.md.
#pragma once

#include "shardalg/cuda/error.hpp"
#include "shardalg/cuda/types.hpp"
#include "shardalg/cuda/random.hpp"
#include "shardalg/cuda/context.hpp"
#include "shardalg/cuda/device_matrix.hpp"
#include "shardalg/cuda/nccl.hpp"
#include "shardalg/cuda/sim_world.hpp"
#if defined(__CUDACC__)
#include "shardalg/cuda/kernels.cuh"
#include "shardalg/cuda/backend.hpp"
#include "shardalg/cuda/ops.hpp"
#include "shardalg/cuda/sim_comm.hpp"
#include "shardalg/cuda/nn_kernels.cuh"
#endif
