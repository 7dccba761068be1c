// shardalg/shardalg.hpp — the umbrella header: the core algebra, the CPU backend, and the
// one-rank and thread communicators. MPI is opt-in: include "shardalg/mpi.hpp" as well.
// CUDA/NCCL is opt-in: "shardalg/cuda/cuda.hpp".
#pragma once

#include "shardalg/version.hpp"
#include "shardalg/core/layout.hpp"
#include "shardalg/core/dtype.hpp"
#include "shardalg/core/errors.hpp"
#include "shardalg/core/rules.hpp"
#include "shardalg/core/backend_cpu.hpp"
#include "shardalg/core/threads.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/dense.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/ledger.hpp"
#include "shardalg/comm/self.hpp"
#include "shardalg/comm/thread.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/collective/all_to_all.hpp"
#include "shardalg/collective/conjugates.hpp"
