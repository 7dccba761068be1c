// src/runtime.cpp — shardalg::compiled: the runtime compiled once (base/linkage.hpp): the thread
// world, the ledger and the fingerprints' descriptions (SHARDALG_FUNC bodies), and ThreadComm with
// its ledgered Group.
#define SHARDALG_COMPILE_RUNTIME
#include "shardalg/comm/collective_check.hpp"
#include "shardalg/comm/p2p_check.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/comm/thread.hpp"
#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/observe/ledger.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg {
template class BasicThreadComm<HostOps>;
template struct Group::Model<ThreadComm>;
template class Ledgered<ThreadComm>;
template struct Group::Model<Ledgered<ThreadComm>>;
}  // namespace shardalg
