// The property test's random programs in double (fuzz_programs.hpp, FUZZ_TYPES_COMPILED_APART).
#include "fuzz_programs.hpp"

namespace fuzz {
template Outcome run_typed<double>(const Group&, std::uint64_t, int);
}  // namespace fuzz
