// Break-it lab 2 (docs/course/break_it/02_forgotten_copy_to.md): the forgotten f. The residual stream X[I] fed
// straight into a column-parallel matmul would skip f's backward all-reduce (each rank would keep
// only its columns' share of dX). The type says so: I mixed with C is E170; ad::copy_to(x) fixes it.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto x = t.input(shard<Invariant>(CpuBackend::matrix<double>::Random(4, 8), g));
  auto w = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(8, 6), g));
#ifdef SHARDALG_EXPECT_FAIL
  auto y = ad::matmul(x, w);
#else
  auto y = ad::matmul(ad::copy_to(x), w);
#endif
  (void)y;
}
