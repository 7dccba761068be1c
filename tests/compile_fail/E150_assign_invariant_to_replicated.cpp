// [shardalg.E150] an Invariant tensor assigned to a Replicated variable: leaving the invariant
// world is Megatron's f, a conversion with a backward all-reduce, and must be named. The implicit
// conversion must not compile; `copy_to(h)` must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Sharded<double, Invariant> h(CpuBackend::matrix<double>::Zero(2, 2), 2, 2, Group(SelfComm{}));
#ifdef SHARDALG_EXPECT_FAIL
  Sharded<double, Replicated> x = h;
#else
  Sharded<double, Replicated> x = copy_to(h);
#endif
  (void)x;
}
