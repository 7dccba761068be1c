// tests/layers/test_layers_float.cpp — the layer cases of cases.hpp in float (case_instances.hpp), compiled once here.
#include "case_instances.hpp"

namespace lt {
template Checks case_linear<float>(const Group&);
template Checks case_mlp<float>(const Group&, nn::Activation);
template Checks case_norm<float>(const Group&, nn::NormKind);
template Checks case_dropout<float>(const Group&);
template Checks case_attention<float>(const Group&, Index, double);
template Checks case_block<float>(const Group&, const BlockCase&);
}  // namespace lt
