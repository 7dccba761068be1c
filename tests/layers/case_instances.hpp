// tests/layers/case_instances.hpp — the cases of cases.hpp on the CPU backend, in double and in float,
// compiled once per executable: in test_layers_double.cpp and test_layers_float.cpp (one element type
// each), which layers_thread and layers_mpi both link; and the dense twins they compare with, in
// dense_twins.cpp (dense_twins.hpp).
#pragma once

#include "cases.hpp"
#include "dense_twins.hpp"

namespace lt {

extern template Checks case_linear<double>(const Group&);
extern template Checks case_mlp<double>(const Group&, nn::Activation);
extern template Checks case_norm<double>(const Group&, nn::NormKind);
extern template Checks case_dropout<double>(const Group&);
extern template Checks case_attention<double>(const Group&, Index, double);
extern template Checks case_block<double>(const Group&, const BlockCase&);
extern template LedgerSummary ledger_case<double>(const Group&, const BlockCase&);
extern template Checks case_linear<float>(const Group&);
extern template Checks case_mlp<float>(const Group&, nn::Activation);
extern template Checks case_norm<float>(const Group&, nn::NormKind);
extern template Checks case_dropout<float>(const Group&);
extern template Checks case_attention<float>(const Group&, Index, double);
extern template Checks case_block<float>(const Group&, const BlockCase&);

}  // namespace lt
