// tests/layers/test_layers_float.cpp — the layer cases of cases.hpp in float (case_instances.hpp), compiled once here.
#include "case_instances.hpp"

namespace lt {
LT_LAYER_CASES(, float)
}  // namespace lt
