// [shardalg.E150] passing a RowSharded tensor where a ColSharded one is expected must not
// compile (the message names all_to_all); `redistribute<ColSharded>(x)` must.
#include <shardalg/shardalg.hpp>

using namespace shardalg;

static Index width(const Sharded<double, ColSharded>& x) { return x.local_cols(); }

int main() {
  auto x = Sharded<double, RowSharded>(CpuBackend::matrix<double>::Zero(4, 4), 4, 4, Group(SelfComm{}));
#ifdef SHARDALG_EXPECT_FAIL
  return static_cast<int>(width(x));
#else
  return static_cast<int>(width(redistribute<ColSharded>(x)));
#endif
}
