// tests/gpt/test_sp_block.cpp — the sequence-parallel block in float (sp_block_cases.hpp): equal to
// the dense block, and its ledger per block. The optimizers on sharded parameters:
// test_sp_optim.cpp.
#include "sp_block_cases.hpp"

TEST_CASE("sequence-parallel block equals the dense block (LN/RMS, GeLU/SwiGLU, MHA/GQA, dropout), float") {
  sp_cases::block_equals_dense<float>();
}

TEST_CASE("SP ledger per block, float: 2 all_gather + 2 reduce_scatter of T·h each way, norm weights 2h each, same "
          "bytes as 4 all-reduces; activations between blocks / P") {
  sp_cases::ledger_per_block<float>();
}
