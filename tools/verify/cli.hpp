// tools/verify/cli.hpp — shardalg-verify's flags (CLI11).
#pragma once

#include <optional>

#include "options.hpp"

namespace sv {

struct Parsed {
  Options options;
  bool tp_given = false;        // --tp on the command line (under mpirun it must match the process count)
  std::optional<int> exit_code;  // set when parsing ended the run: --help (0) or a bad flag (CLI11's message printed)
};

Parsed parse_options(int argc, char** argv);

}  // namespace sv
