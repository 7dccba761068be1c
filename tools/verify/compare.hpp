// tools/verify/compare.hpp — the `compare` subcommand (compare.cpp).
#pragma once

namespace sv {

/// `shardalg-verify compare …`: argv[0] is "compare". Returns the exit status.
int compare_main(int argc, char** argv);

}  // namespace sv
