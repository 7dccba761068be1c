// src/algebra.cpp — shardalg::compiled: the algebra's common instantiations compiled once, for
// float and double on the CPU (base/linkage.hpp): the planner's steps (step_to, the operands'
// chains, the local product: every collective of plan/plan.hpp's table for every layout pair),
// the collectives on uneven blocks and the replica check.
#include "shardalg/bridge/dense.hpp"
#include "shardalg/collective/uneven.hpp"
#include "shardalg/plan/matmul.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::detail {

#define SHARDALG_ALGEBRA_L(T, L)                                                                                  \
  template Moving<T, CpuBackend> run_chain_on<T, L, CpuBackend>(const Sharded<T, L, CpuBackend>&, const plan::Chain&); \
  template Moving<T, CpuBackend> run_chain_on<T, L, CpuBackend>(const Sharded<T, L, CpuBackend>&, const plan::Chain&, \
                                                                const Group&);                                    \
  template Sharded<T, L, CpuBackend> run_chain_to<L, T, CpuBackend>(Moving<T, CpuBackend>&&, const plan::Chain&);
#define SHARDALG_ALGEBRA(T)                                                                                       \
  template Moving<T, CpuBackend> step_to<T, CpuBackend>(Moving<T, CpuBackend>&&, LayoutKind);                     \
  template Moving<T, CpuBackend> run_product<T, CpuBackend>(const Moving<T, CpuBackend>&, bool,                   \
                                                            const Moving<T, CpuBackend>&, bool, Index, Index);    \
  SHARDALG_ALGEBRA_L(T, Replicated)                                                                               \
  SHARDALG_ALGEBRA_L(T, RowSharded)                                                                               \
  SHARDALG_ALGEBRA_L(T, ColSharded)                                                                               \
  SHARDALG_ALGEBRA_L(T, Partial)                                                                                  \
  template CpuBackend::matrix<T> gather_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, Index, Index, bool,   \
                                                              Group&, const CallInfo&);                           \
  template CpuBackend::matrix<T> reduce_scatter_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, bool, Group&, \
                                                                      const CallInfo&);                           \
  template CpuBackend::matrix<T> exchange_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, Index, Index, bool, \
                                                                Group&, const CallInfo&);                         \
  template void check_replicas_agree<T>(const T*, Index, Index, Group&, std::string_view);
SHARDALG_ALGEBRA(float)
SHARDALG_ALGEBRA(double)

}  // namespace shardalg::detail
