// shardalg/verify/verify.hpp — checking a sharded run against its dense twin, from your own
// program (what shardalg-verify does for a GPT, for any layer or model):
//
//   check.hpp    per-layer checks: every output and gradient vs the dense one, normwise relative
//                error, pass/fail against tolerance_for<T>(); padding must be exactly zero
//   tally.hpp    the collectives a Ledger recorded, per kind and scope: count and bytes
//   memory.hpp   the bytes a rank holds, summed from its tensors
//   gather.hpp   per-rank measurements to every rank as (unledgered) verification traffic
//   timing.hpp   phases and a timing Communicator decorator: one rank's timeline
//   explain.hpp  a derivation as executed: layouts from the types, collectives from the ledger
//
// Standard library and Eigen only, like the core.
#pragma once

#include "shardalg/verify/check.hpp"
#include "shardalg/observe/derivation.hpp"
#include "shardalg/verify/gather.hpp"
#include "shardalg/observe/held_bytes.hpp"
#include "shardalg/observe/tally.hpp"
#include "shardalg/observe/timing.hpp"
