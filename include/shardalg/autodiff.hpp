// shardalg/autodiff.hpp — reverse-mode differentiation of sharded programs (docs/design.md
// §10a): the tape and Var (tape.hpp), the linear ops (linear.hpp), redistributions and conversions
// (collectives.hpp), elementwise and row-wise ops (elementwise.hpp), matmul<To> (planned.hpp), the
// fused layer ops (nn.hpp), and verify() of any program against its dense twin (verify.hpp).
#pragma once

#include "shardalg/autodiff/collectives.hpp"
#include "shardalg/autodiff/elementwise.hpp"
#include "shardalg/autodiff/algebra.hpp"
#include "shardalg/autodiff/layer_ops.hpp"
#include "shardalg/autodiff/planned.hpp"
#include "shardalg/autodiff/tape.hpp"
