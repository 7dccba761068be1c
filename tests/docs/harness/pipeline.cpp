// The pipeline's headers (schedules, the simulator, stage assignments) and an op's place r, i.
#include <shardalg/pipeline/schedule.hpp>
#include <shardalg/pipeline/simulate.hpp>
#include <shardalg/pipeline/stage_assignment.hpp>
#include <cstddef>
inline void fragment() {
  const int r = 1;          // an op's place in a schedule: rank r,
  const std::size_t i = 2;  // its op i
// FRAGMENT
}
