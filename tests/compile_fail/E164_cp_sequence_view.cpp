// [shardalg.E164] An activation split over the sequence on cp, X[cp:Row, tp:R], handed to a layer
// that needs every token of each sequence — attention without context parallelism takes X[R] on
// tp: view<tp> refuses it while cp still splits it. Gathering the sequence first compiles; so does
// keeping it split and running attention over cp (Attention::set_context_parallel).
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Mesh mesh(Group(SelfComm{}), {{"cp", 1}, {"tp", 1}});
  const MeshSharded<double, Axes<On<cp, RowSharded>, On<tp, Replicated>>> x(CpuBackend::matrix<double>::Zero(4, 2), 4, 2, mesh);
#ifdef SHARDALG_EXPECT_FAIL
  auto v = view<tp>(x);
#else
  auto v = view<tp>(all_gather<cp>(x));
#endif
  (void)v;
}
