// tests/support/mismatch_cases.hpp — the mismatched collectives of issue 14, written once against
// Group so that the thread tests (tests/unit/test_collective_check.cpp) and the MPI tests
// (tests/mpi/test_collective_check_mpi.cpp) run the same calls. Every case is for 2 ranks: rank 0
// and rank 1 call different things. Buffers are sized exactly for what each rank asked for, so
// that a backend reading or writing past them shows up under ASan.
#pragma once

#include <string>
#include <vector>

#include "shardalg/shardalg.hpp"

namespace testing::mismatch {

using namespace shardalg;

inline void all_reduce_f64(Group& g, std::size_t n) {
  std::vector<double> x(n, 1.0);
  g.all_reduce(x.data(), n);
}
inline void all_gather_f64(Group& g, std::size_t n) {
  std::vector<double> s(n, 1.0), r(n * static_cast<std::size_t>(g.size()));
  g.all_gather(s.data(), r.data(), n);
}

/// A case: what each rank calls, and the text of the CollectiveMismatchError after "<Comm>: "
/// that checked mode raises on both ranks.
struct Case {
  const char* name;
  void (*body)(Group&);
  const char* checked;
};

inline const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"barrier vs all_reduce",
       [](Group& g) {
         if (g.rank() == 0) g.barrier();
         else all_reduce_f64(g, 8);
       },
       "mismatched collectives: rank 0: barrier (#1); rank 1: all_reduce f64 × 8 (#1)"},
      {"swapped order",
       [](Group& g) {
         if (g.rank() == 0) {
           all_reduce_f64(g, 8);
           all_gather_f64(g, 4);
         } else {
           all_gather_f64(g, 4);
           all_reduce_f64(g, 8);
         }
       },
       "mismatched collectives: rank 0: all_reduce f64 × 8 (#1); rank 1: all_gather f64 × 4 (#1)"},
      // The issue's example: the third collective, in the scope "mlp.fwd" of rank 0's ledger (the
      // scope is shown, not compared: rank 1 has no ledger).
      {"all_reduce of 8 vs all_gather of 4",
       [](Group& g) {
         all_reduce_f64(g, 2);
         all_reduce_f64(g, 2);
         if (g.rank() == 0) {
           Ledger l;
           Group lg = ledgered(g, l);
           auto s = l.scope("mlp.fwd");
           all_reduce_f64(lg, 8);
         } else {
           all_gather_f64(g, 4);
         }
       },
       "mismatched collectives: rank 0: all_reduce f64 × 8 (#3, mlp.fwd); rank 1: all_gather f64 × 4 (#3)"},
      {"counts 8 vs 6", [](Group& g) { all_reduce_f64(g, g.rank() == 0 ? 8 : 6); },
       "mismatched collectives: rank 0: all_reduce f64 × 8 (#1); rank 1: all_reduce f64 × 6 (#1)"},
      {"f64 vs f32",
       [](Group& g) {
         if (g.rank() == 0) {
           all_reduce_f64(g, 8);
         } else {
           std::vector<float> x(8, 1.0f);
           g.all_reduce(x.data(), 8);
         }
       },
       "mismatched collectives: rank 0: all_reduce f64 × 8 (#1); rank 1: all_reduce f32 × 8 (#1)"},
      {"broadcast roots differ",
       [](Group& g) {
         std::vector<double> x(8, g.rank());
         g.broadcast(x.data(), 8, g.rank());
       },
       "mismatched collectives: rank 0: broadcast f64 × 8 from rank 0 (#1); rank 1: broadcast f64 × 8 from rank 1 "
       "(#1)"},
      {"all_gather blocks 4 vs 3", [](Group& g) { all_gather_f64(g, g.rank() == 0 ? 4 : 3); },
       "mismatched collectives: rank 0: all_gather f64 × 4 (#1); rank 1: all_gather f64 × 3 (#1)"},
      {"reduce_scatter blocks 4 vs 3",
       [](Group& g) {
         const std::size_t n = g.rank() == 0 ? 4 : 3;
         std::vector<double> s(n * static_cast<std::size_t>(g.size()), 1.0), r(n);
         g.reduce_scatter(s.data(), r.data(), n);
       },
       "mismatched collectives: rank 0: reduce_scatter f64 × 4 (#1); rank 1: reduce_scatter f64 × 3 (#1)"},
      {"all_to_all blocks 4 vs 3",
       [](Group& g) {
         const std::size_t n = g.rank() == 0 ? 4 : 3;
         std::vector<double> s(n * static_cast<std::size_t>(g.size()), 1.0), r(s.size());
         g.all_to_all(s.data(), r.data(), n);
       },
       "mismatched collectives: rank 0: all_to_all f64 × 4 (#1); rank 1: all_to_all f64 × 3 (#1)"},
      // Beyond the issue's list: the reduce op, and the layouts a redistribution passes.
      {"sum vs max",
       [](Group& g) {
         std::vector<double> x(8, 1.0);
         g.all_reduce(x.data(), 8, g.rank() == 0 ? ReduceOp::sum : ReduceOp::max);
       },
       "mismatched collectives: rank 0: all_reduce f64 × 8 (#1); rank 1: all_reduce(max) f64 × 8 (#1)"},
      {"layouts differ",
       [](Group& g) {
         std::vector<double> x(8, 1.0);
         g.all_reduce(x.data(), 8, ReduceOp::sum, g.rank() == 0 ? CallInfo{"Partial", "R"} : CallInfo{"C", "R"});
       },
       "mismatched collectives: rank 0: all_reduce f64 × 8 Partial → R (#1); rank 1: all_reduce f64 × 8 C → R "
       "(#1)"},
  };
  return all;
}

}  // namespace testing::mismatch
