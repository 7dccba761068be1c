// α-β calibration on an MpiComm: every rank measures, fits and gets the same model; the model
// predicts two held-out sizes inside the fitted range within a factor of 3 (see
// test_calibration.cpp for why 3). Only interpolation here: two busy-polling MPI processes on a
// shared 2-core machine slow the large messages (many fragment hand-offs, each waiting for a
// time slice) far more than the small ones: with medians, an 8 MiB extrapolation measured 0.15× to
// 0.9× of its prediction from run to run; Open MPI also switches all-reduce algorithms by message size.
#include <doctest/doctest.h>

#include <cstdio>

#include "shardalg/mpi.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

TEST_CASE("MpiComm all-reduce: the calibrated model predicts held-out sizes within 3x") {
  shardalg::Group g(shardalg::MpiComm(MPI_COMM_WORLD));
  const std::vector<std::size_t> sizes = {1u << 12, 1u << 14, 3u << 15, 1u << 16, 1u << 18, 3u << 17, 1u << 20};
  const auto all = cost::measure_all_reduce(g, sizes, 15);
  std::vector<cost::TimingSample> fit_samples;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (i != 2 && i != 5) fit_samples.push_back(all[i]);  // hold out 384 KiB and 1.5 MiB
  const auto link = cost::all_reduce_alpha_beta(cost::fit_line(fit_samples), g.size());
  CHECK(link.alpha_seconds >= 0.0);
  CHECK(link.beta_bytes_per_second > 0.0);
  // every rank fitted the same samples (they are maxima over ranks), so holds the same model
  double beta_max = link.beta_bytes_per_second;
  g.all_reduce(&beta_max, 1, shardalg::ReduceOp::max);
  CHECK(beta_max == link.beta_bytes_per_second);
  for (std::size_t i : {std::size_t{2}, std::size_t{5}}) {
    const double ratio = cost::all_reduce_seconds(link, all[i].dense_bytes, g.size()) / all[i].seconds;
    if (g.rank() == 0)
      std::printf("MPI P=%d  held out %10.0f B: measured %.3g s, ratio predicted/measured %.2f\n", g.size(),
                  all[i].dense_bytes, all[i].seconds, ratio);
    CHECK(ratio < 3.0);
    CHECK(ratio > 1.0 / 3.0);
  }
}
