// doctest's main for the thread and unit tests: the replica check and checked collectives
// (shardalg/core/checks.hpp) are on for every test, whatever the build type, so a test that hands different data to
// shard<Replicated> fails where it does so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "shardalg/core/checks.hpp"

int main(int argc, char** argv) {
  shardalg::set_check_replicas(true);
  shardalg::set_check_collectives(true);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
