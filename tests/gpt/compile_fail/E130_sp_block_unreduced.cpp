// [shardalg.E130] the sequence-parallel block's norm-weight gradients come out Partial (each rank
// summed only its own tokens). Handing backward's ParamGrads to the update without reduce_grads
// — Megatron's recurring sequence-parallel bug — must not compile; with the reduction it must.
#include <shardalg/comm/self.hpp>
#include <shardalg/nn/layers/sp_block.hpp>

using namespace shardalg;

int main() {
  const Group g(SelfComm{});
  nn::BlockConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.seq = 2;
  c.ffn = 16;
  auto blk = nn::SequenceParallelBlock<double>::init(c, g, nn::InitConfig{});
  const auto x = Sharded<double, RowSharded>(CpuBackend::matrix<double>::Ones(4, 8), 4, 8, g);
  const auto f = blk.forward(x);
  auto grads = blk.backward(f.cache, x).params;  // grads.ln1.dgamma: [1, 8] Partial
#ifdef SHARDALG_EXPECT_FAIL
  blk.sgd(grads, 0.1);
#else
  blk.sgd(blk.reduce_grads(std::move(grads)), 0.1);
#endif
}
