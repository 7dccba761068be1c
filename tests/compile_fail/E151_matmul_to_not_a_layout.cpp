// [shardalg.E151] matmul<To> with a To that is not a layout must not compile; a layout must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  auto a = Sharded<double, Replicated>(CpuBackend::matrix<double>::Zero(4, 4), 4, 4, Group(SelfComm{}));
#ifdef SHARDALG_EXPECT_FAIL
  auto y = matmul<double>(a, a);
#else
  auto y = matmul<ColSharded>(a, a);
#endif
  (void)y;
}
