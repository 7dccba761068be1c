// tests/layers/case_instances.hpp — the cases of cases.hpp on the CPU backend, in double and in float,
// compiled once per executable: in test_layers_double.cpp and test_layers_float.cpp (one element type
// each), which layers_thread and layers_mpi both link; and the dense twins they compare with, in
// dense_twins.cpp (dense_twins.hpp).
#pragma once

#include "cases.hpp"
#include "dense_twins.hpp"

/// The layer cases of one element type T, declared (SPEC = extern) or instantiated (SPEC empty):
/// one list, so the declarations here and the instantiations in test_layers_<T>.cpp cannot drift.
#define LT_LAYER_CASES(SPEC, T)                                           \
  SPEC template Checks case_linear<T>(const Group&);                      \
  SPEC template Checks case_mlp<T>(const Group&, nn::Activation);         \
  SPEC template Checks case_norm<T>(const Group&, nn::NormKind);          \
  SPEC template Checks case_dropout<T>(const Group&);                     \
  SPEC template Checks case_attention<T>(const Group&, Index, double);    \
  SPEC template Checks case_block<T>(const Group&, const BlockCase&);

namespace lt {

LT_LAYER_CASES(extern, double)
extern template LedgerSummary ledger_case<double>(const Group&, const BlockCase&);
LT_LAYER_CASES(extern, float)

}  // namespace lt
