// tests/gpt/test_sp_block_double.cpp — the sequence-parallel block in double (sp_block_cases.hpp), then
// the largest relative error of either type (this file runs after test_sp_block.cpp).
#include "sp_block_cases.hpp"

TEST_CASE("sequence-parallel block equals the dense block (LN/RMS, GeLU/SwiGLU, MHA/GQA, dropout), double") {
  sp_cases::block_equals_dense<double>();
}

TEST_CASE("SP ledger per block, double: 2 all_gather + 2 reduce_scatter of T·h each way, norm weights 2h each, same "
          "bytes as 4 all-reduces; activations between blocks / P") {
  sp_cases::ledger_per_block<double>();
}

TEST_CASE("z: largest relative error of the SP block against the dense block") {
  MESSAGE("float: " << sp_cases::worst(false).rel << " (" << sp_cases::worst(false).what << ")");
  MESSAGE("double: " << sp_cases::worst(true).rel << " (" << sp_cases::worst(true).what << ")");
  CHECK(sp_cases::worst(true).rel <= 1e-12);
  CHECK(sp_cases::worst(false).rel <= 1e-5);
}
