// tools/verify/precision_double.cpp — `--dtype double --bounds`: the sub-layer checks of
// precision_blocks.hpp for a double program against its twins over Running<f64> (a TU of its own:
// one more element type beside float, bf16 and fp16 in precision.cpp would take its compile past
// 1.3 GB).
#include "precision_blocks.hpp"

namespace sv::blocks {

std::vector<BoundRow> double_rows(const Options& o, int p) { return check_blocks_of<double>(o, p); }

}  // namespace sv::blocks
