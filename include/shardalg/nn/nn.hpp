// shardalg/nn/nn.hpp — the Megatron tensor-parallel layers, each with an explicit forward (that
// returns what its backward needs) and backward (the input gradient and every parameter gradient,
// in the layouts of the core's adjoint table). See docs/layers/.
#pragma once

#include "shardalg/shardalg.hpp"
#include "shardalg/nn/random.hpp"
#include "shardalg/nn/kernels.hpp"
#include "shardalg/nn/init.hpp"
#include "shardalg/nn/optim.hpp"
#include "shardalg/nn/activation.hpp"
#include "shardalg/nn/linear.hpp"
#include "shardalg/nn/mlp.hpp"
#include "shardalg/nn/norm.hpp"
#include "shardalg/nn/dropout.hpp"
#include "shardalg/nn/attention.hpp"
#include "shardalg/nn/block.hpp"
#include "shardalg/nn/embedding.hpp"
#include "shardalg/nn/cross_entropy.hpp"
#include "shardalg/nn/sp_block.hpp"
#include "shardalg/nn/gpt.hpp"
// nn/checkpoint.hpp is opt-in: it needs nlohmann-json.
