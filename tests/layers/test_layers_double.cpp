// tests/layers/test_layers_double.cpp — the layer cases of cases.hpp in double (case_instances.hpp), compiled once here.
#include "case_instances.hpp"

namespace lt {
template Checks case_linear<double>(const Group&);
template Checks case_mlp<double>(const Group&, nn::Activation);
template Checks case_norm<double>(const Group&, nn::NormKind);
template Checks case_dropout<double>(const Group&);
template Checks case_attention<double>(const Group&, Index, double);
template Checks case_block<double>(const Group&, const BlockCase&);
template LedgerSummary ledger_case<double>(const Group&, const BlockCase&);
}  // namespace lt
