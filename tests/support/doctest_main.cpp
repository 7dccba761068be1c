// doctest's main for the thread and unit tests: the replica check and checked collectives
// (shardalg/base/checks.hpp) are on for every test, whatever the build type, so a test that hands different data to
// shard<Replicated> fails where it does so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

#include "shardalg/base/checks.hpp"

int main(int argc, char** argv) {
  shardalg::set_check_replicas(true);
  shardalg::set_check_collectives(true);
  // The watchdog's limit: generous on a loaded test machine, unless SHARDALG_COLLECTIVE_TIMEOUT says.
  if (!std::getenv("SHARDALG_COLLECTIVE_TIMEOUT")) shardalg::set_collective_timeout(60);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
