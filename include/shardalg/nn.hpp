// shardalg/nn.hpp — the Megatron tensor-parallel layers, each with an explicit forward (that
// returns what its backward needs) and backward (the input gradient and every parameter gradient,
// in the layouts of the core's adjoint table), and the GPT built from them. See docs/layers/ and
// docs/gpt.md. Opt-in beside it: nn/models/data_parallel.hpp (a dp × tp mesh, ZeRO-1),
// nn/models/pipeline_gpt.hpp, nn/layers/moe.hpp, nn/layers/conv2d.hpp, and nn/train/checkpoint.hpp
// (needs nlohmann-json).
#pragma once

#include "shardalg/shardalg.hpp"
#include "shardalg/backend/random.hpp"
#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/nn/layers/init.hpp"
#include "shardalg/nn/optim/optim.hpp"
#include "shardalg/backend/activation.hpp"
#include "shardalg/nn/layers/linear.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/nn/layers/norm.hpp"
#include "shardalg/nn/layers/dropout.hpp"
#include "shardalg/nn/layers/attention.hpp"
#include "shardalg/nn/layers/block.hpp"
#include "shardalg/nn/layers/embedding.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/sp_block.hpp"
#include "shardalg/nn/models/gpt.hpp"
