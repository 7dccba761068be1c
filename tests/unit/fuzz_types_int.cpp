// The property test's random programs in int32 and int64 (fuzz_programs.hpp, FUZZ_TYPES_COMPILED_APART).
#include "fuzz_programs.hpp"

namespace fuzz {
template Outcome run_typed<std::int32_t>(const Group&, std::uint64_t, int);
template Outcome run_typed<std::int64_t>(const Group&, std::uint64_t, int);
}  // namespace fuzz
