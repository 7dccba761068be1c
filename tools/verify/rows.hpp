// tools/verify/rows.hpp — rank 0 turns what every rank measured into the report's rows: each
// row's collectives from the ledger (verify::tally) beside the analytic ones, its predicted,
// measured and compute time, its memory (max over ranks); and nn::Gpt's row, whose collectives
// must be the layer-by-layer run's.
#pragma once

#include <cstddef>
#include <vector>

#include "options.hpp"
#include "result.hpp"

namespace sv {

/// Every rank's measurements, rank r's at r·n + i (verify::gather_doubles).
struct Gathered {
  const std::vector<double>& coll;   // each ledgered collective's seconds
  const std::vector<double>& phase;  // per row: forward, backward seconds
  const std::vector<double>& mem;    // per row: parameter, gradient, activation bytes
  std::size_t n_coll, n_phase, n_mem;
};

/// Fills the ledger, analytic, time and memory columns of `rows` and appends `gpt` (the nn::Gpt
/// row) with its tallies. `elem`: sizeof the element type; `sp`: sequence parallelism.
void assemble_rows(std::vector<Row>& rows, Row gpt, const Options& o, int p, bool sp, std::size_t elem,
                   const std::vector<LedgerEntry>& entries, const cost::Calibration& cal, const Gathered& g);

}  // namespace sv
