// Break-it lab 3 (docs/course/break_it/03_all_reduce_twice.md): an all-reduce applied twice. The first all_reduce
// makes Z[Partial] whole (R); a second one would sum P copies — P·Z. An R has no pending sum: E120.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto h = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto w = t.input(shard<RowSharded>(CpuBackend::matrix<double>::Random(8, 6), g));
  auto z = ad::all_reduce<Invariant>(ad::matmul(h, w));  // H[C] · W[Row] → Partial → g → I
#ifdef SHARDALG_EXPECT_FAIL
  auto twice = ad::all_reduce(z);
  (void)twice;
#endif
  (void)z;
}
