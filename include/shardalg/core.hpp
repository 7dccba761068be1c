// shardalg/core.hpp — the algebra alone: Sharded<T, L> on the CPU backend, matmul and the
// elementwise ops, the collectives and their adjoints, the dense bridge (shard, to_dense,
// compare), the planner (matmul<To>, redistribute<To>), the ledger, and the one-rank and thread
// communicators (run_ranks). What a program that shards a few products and checks them needs,
// and the lightest umbrella to compile. shardalg.hpp adds meshes and the verify helpers;
// nn.hpp the layers and the GPT; autodiff.hpp derived gradients; mpi.hpp MpiComm.
#pragma once

#include "shardalg/version.hpp"
#include "shardalg/base/layout.hpp"
#include "shardalg/base/dtype.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/diagnostics.hpp"
#include "shardalg/base/rules.hpp"
#include "shardalg/base/threads.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/comm/self.hpp"
#include "shardalg/comm/thread.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cpu/allocator.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/cast.hpp"
#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/reduce_scatter.hpp"
#include "shardalg/collective/split.hpp"
#include "shardalg/collective/all_to_all.hpp"
#include "shardalg/collective/conjugates.hpp"
#include "shardalg/collective/invalid.hpp"
#include "shardalg/collective/sum.hpp"
#include "shardalg/bridge/dense.hpp"
#include "shardalg/plan/plan.hpp"
#include "shardalg/plan/redistribute.hpp"
#include "shardalg/plan/matmul.hpp"
#include "shardalg/observe/ledger.hpp"
