// The transformer block with context parallelism on a cp × tp mesh against the dense block, every gradient.
#include <doctest/doctest.h>

#include "cp_block_cases.hpp"

using namespace shardalg;

namespace cpb {

Dense dense_block(const ref::Block& rb, const lt::M& x, const lt::M& dy) {
  Dense d{ref::block_forward(rb, x), {}};
  d.g = ref::block_backward(rb, x, d.o, dy);
  return d;
}

}  // namespace cpb

TEST_CASE("the transformer block with context parallelism equals the dense block: cp 1, 2, 4 × tp 1, 2, ring and all-to-all, ± dropout, every gradient") {
  const lt::BlockCase mha{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.0};
  const lt::BlockCase gqa{nn::NormKind::rms, nn::Activation::swiglu, false, 2, 0.0};
  // hidden dropout 0.1 and attention dropout 0.2: the masks at the chunks' global rows and positions
  const lt::BlockCase dropped{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.1, 0.2};
  const lt::BlockCase dropped_gqa{nn::NormKind::rms, nn::Activation::swiglu, false, 2, 0.1, 0.2};
  struct Run {
    int cp, tp;
    lt::BlockCase bc;
    nn::CpAlgo algo;
  };
  const std::vector<Run> runs{{1, 1, mha, nn::CpAlgo::ring},       {2, 1, mha, nn::CpAlgo::ring},  {4, 1, gqa, nn::CpAlgo::ring},
                              {2, 2, mha, nn::CpAlgo::ring},       {2, 2, gqa, nn::CpAlgo::ring},  {4, 2, mha, nn::CpAlgo::ring},
                              {2, 2, mha, nn::CpAlgo::all_to_all}, {4, 1, mha, nn::CpAlgo::all_to_all},
                              {2, 2, dropped, nn::CpAlgo::ring},   {4, 1, dropped_gqa, nn::CpAlgo::ring},
                              {2, 2, dropped, nn::CpAlgo::all_to_all}};
  for (const auto& r : runs) {
    CAPTURE(r.cp);
    CAPTURE(r.tp);
    CAPTURE(r.bc.groups);
    CAPTURE(int(r.algo));
    run_ranks(r.cp * r.tp, [&](ThreadComm& c) {
      for (const auto& e : cpb::block_cp_errors<double>(c, r.cp, r.tp, r.bc, r.algo)) CHECK_MESSAGE(e.second < 1e-12, e.first << ": " << e.second);
    });
  }
  run_ranks(2, [&](ThreadComm& c) {  // float, its tolerance
    for (const auto& e : cpb::block_cp_errors<float>(c, 2, 1, mha, nn::CpAlgo::ring)) CHECK_MESSAGE(e.second < 1e-5, e.first << ": " << e.second);
  });
}
