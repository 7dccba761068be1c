// shardalg/shardalg.hpp — the umbrella header: the algebra (shardalg/core.hpp), meshes of named
// axes, and the observation and verification helpers (ledger tallies, timing, the explain log,
// held bytes, visualize, checks against a dense twin). Opt-in beside it: "shardalg/nn.hpp" (the
// layers and the GPT), "shardalg/autodiff.hpp" (derived gradients), "shardalg/mpi.hpp" (MpiComm),
// "shardalg/cuda.hpp" (CUDA/NCCL, from a .cu file).
#pragma once

#include "shardalg/core.hpp"
#include "shardalg/mesh/axis.hpp"
#include "shardalg/mesh/mesh.hpp"
#include "shardalg/mesh/layouts.hpp"
#include "shardalg/mesh/sharded.hpp"
#include "shardalg/mesh/collectives.hpp"
#include "shardalg/mesh/ops.hpp"
#include "shardalg/observe/visualize.hpp"
#include "shardalg/verify/verify.hpp"
