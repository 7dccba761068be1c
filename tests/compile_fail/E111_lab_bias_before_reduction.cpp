// Break-it lab 5 (docs/course/break_it/05_bias_before_reduction.md): a row-parallel layer's bias added before the
// reduction. Every rank would add b to its summand, and the all-reduce would hold P·b. A bias on a
// Partial is E111: reduce first (g), then add it once.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto h = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto w = t.input(shard<RowSharded>(CpuBackend::matrix<double>::Random(8, 6), g));
  auto b = t.input(shard<Invariant>(CpuBackend::matrix<double>::Random(1, 6), g));
#ifdef SHARDALG_EXPECT_FAIL
  auto z = ad::all_reduce<Invariant>(ad::add_bias(ad::matmul(h, w), b));
#else
  auto z = ad::add_bias(ad::all_reduce<Invariant>(ad::matmul(h, w)), b);
#endif
  (void)z;
}
