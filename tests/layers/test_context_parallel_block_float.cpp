// The transformer block with context parallelism in float (cp_block_cases.hpp), compiled once here.
#include "cp_block_cases.hpp"

using namespace shardalg;

template cpb::Errors cpb::block_cp_errors<float>(ThreadComm&, int, int, const lt::BlockCase&, nn::CpAlgo);
