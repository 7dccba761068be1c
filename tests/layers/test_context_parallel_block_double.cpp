// The transformer block with context parallelism in double (cp_block_cases.hpp), and what it refuses.
#include <doctest/doctest.h>

#include "cp_block_cases.hpp"

using namespace shardalg;

template cpb::Errors cpb::block_cp_errors<double>(ThreadComm&, int, int, const lt::BlockCase&, nn::CpAlgo);

TEST_CASE("context parallelism refuses what it cannot split: the sequence, rows that are not whole chunks") {
  run_ranks(2, [](ThreadComm& c) {
    Group g(c);
    lt::BlockCase bc{nn::NormKind::layer, nn::Activation::gelu_tanh, true, lt::kHeads, 0.0};
    auto rb = lt::make_ref_block(bc, [](Index r, Index cc, std::uint64_t sd, double sc) { return lt::rnd<double>(r, cc, sd, sc); });
    auto cfg = lt::block_config(bc);  // seq 6: not 4 chunks of a whole number of positions
    auto blk = nn::TransformerBlock<double>::from_dense(cfg, lt::block_masters(bc, rb), Group(SelfComm{}));
    CHECK_THROWS_WITH_AS(blk.attention().set_context_parallel(g),
                         "context parallelism: sequence length 6 is not divisible by 2·cp = 4 (two chunks per rank, for the causal balance)",
                         DivisibilityError);
    cfg.seq = 8;
    rb.attn.seq = 8;
    auto ok = nn::TransformerBlock<double>::from_dense(cfg, lt::block_masters(bc, rb), Group(SelfComm{}));
    ok.attention().set_context_parallel(g);
    const lt::M x = lt::rnd<double>(6, lt::kHidden, 1);
    CHECK_THROWS_WITH_AS(ok.forward(lt::shard_as<Replicated, double, CpuBackend>(x, Group(SelfComm{}))),
                         "Attention: 6 rows are not a whole number of sequences' chunks: 4 rows per sequence on each of 2 context-parallel ranks (sequence length 8)",
                         ShapeError);
  });
}
