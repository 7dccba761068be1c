// src/algebra.cpp — shardalg::compiled: the algebra's common instantiations compiled once, for
// float and double on the CPU (base/linkage.hpp): the planner's steps (step_to, the operands'
// chains, the local product: every collective of plan/plan.hpp's table for every layout pair),
// the collectives on uneven blocks and the replica check.
#include "shardalg/bridge/dense.hpp"
#include "shardalg/collective/uneven.hpp"
#include "shardalg/plan/matmul.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::detail {

// The lists are the headers' (SHARDALG_*_INSTANCES), here as definitions.
SHARDALG_PLAN_INSTANCES(template, float)
SHARDALG_PLAN_INSTANCES(template, double)
SHARDALG_UNEVEN_INSTANCES(template, float)
SHARDALG_UNEVEN_INSTANCES(template, double)
SHARDALG_REPLICA_CHECK_INSTANCES(template, float)
SHARDALG_REPLICA_CHECK_INSTANCES(template, double)

}  // namespace shardalg::detail
