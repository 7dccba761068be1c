// shardalg/autodiff.hpp — reverse-mode differentiation of sharded programs (docs/design.md
// §10a): the tape and Var (autodiff/tape.hpp), matmul, + and − (algebra.hpp), redistributions and
// conversions (collectives.hpp), elementwise and row-wise ops (elementwise.hpp), matmul<To>
// (planned.hpp), the fused layer ops (layer_ops.hpp: norms, cross-entropy), and ad::verify of any
// program against its dense twin (verify.hpp). The Megatron layers derived are opt-in:
// "shardalg/autodiff/layers.hpp" (it brings the nn layers they are checked against).
#pragma once

#include "shardalg/shardalg.hpp"

#include "shardalg/autodiff/collectives.hpp"
#include "shardalg/autodiff/elementwise.hpp"
#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/autodiff/layer_ops.hpp"
#include "shardalg/autodiff/planned.hpp"
#include "shardalg/autodiff/tape.hpp"
#include "shardalg/autodiff/verify.hpp"
