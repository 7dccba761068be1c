// tests/plan/plan_cases.cpp — the sweeps that plan_laws (threads) and mpi_plan (mpirun) both run,
// compiled once and linked into both (plan_cases.hpp declares them extern): every (A, B, To) of
// matmul<To> in double with each transpose, and every (From, To) of redistribute<To>.
#include "plan_cases.hpp"

namespace plan_cases {
template void all_matmul_cases<double, false, false>(Group, Ledger&, std::uint64_t, Report&);
template void all_matmul_cases<double, true, false>(Group, Ledger&, std::uint64_t, Report&);
template void all_matmul_cases<double, false, true>(Group, Ledger&, std::uint64_t, Report&);
template void all_matmul_cases<double, true, true>(Group, Ledger&, std::uint64_t, Report&);
template void all_redistribute_cases<double>(Group, Ledger&, std::uint64_t, Report&);
template void all_redistribute_cases<float>(Group, Ledger&, std::uint64_t, Report&);
}  // namespace plan_cases
