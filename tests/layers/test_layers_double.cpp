// tests/layers/test_layers_double.cpp — the layer cases of cases.hpp in double (case_instances.hpp), compiled once here.
#include "case_instances.hpp"

namespace lt {
LT_LAYER_CASES(, double)
template LedgerSummary ledger_case<double>(const Group&, const BlockCase&);
}  // namespace lt
