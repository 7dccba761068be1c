// tests/layers/cp_block_cases.hpp — the transformer block on a cp × tp mesh against the dense block,
// shared by test_context_parallel_block.cpp (the test, and the dense block, compiled once) and
// test_context_parallel_block_{double,float}.cpp (the sharded block, one element type each).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cases.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/mesh/mesh.hpp"

namespace cpb {

using namespace shardalg;

/// The dense block's forward and backward on the whole batch (defined in
/// test_context_parallel_block.cpp).
struct Dense {
  ref::BlockOut o;
  ref::BlockGrads g;
};
Dense dense_block(const ref::Block& rb, const lt::M& x, const lt::M& dy);

/// The transformer block on a cp × tp mesh (attention over cp by `algo`) against the dense block on
/// the whole batch: Y and dX on this rank's rows; every parameter gradient summed over cp (each
/// cp rank's is the summand of its tokens: G[cp:Partial]) against the dense gradient.
template <class T>
std::vector<std::pair<std::string, double>> block_cp_errors(ThreadComm& c, int cp, int tp, const lt::BlockCase& bc, nn::CpAlgo algo) {
  using lt::M;
  constexpr Index S = 8, Bt = 2;
  Group world(c);
  Mesh mesh(world, {{"cp", cp}, {"tp", tp}});
  const Group& tg = mesh.group("tp");
  Group cg = mesh.group("cp");
  auto rb = lt::make_ref_block(bc, [](Index r, Index cc, std::uint64_t sd, double sc) { return lt::rnd<T>(r, cc, sd, sc); });
  rb.attn.seq = S;
  auto cfg = lt::block_config(bc);
  cfg.seq = S;
  auto blk = nn::TransformerBlock<T>::from_dense(cfg, lt::block_masters(bc, rb), tg);
  blk.set_context_parallel(cg, algo);  // attention over cp, the dropout masks at the chunks' rows
  const nn::CpTokens tok{S, Bt, cp, cg.rank()};
  const M x = lt::rnd<T>(Bt * S, lt::kHidden, 201), dy = lt::rnd<T>(Bt * S, lt::kHidden, 202);
  const auto f = blk.forward(lt::shard_as<Replicated, T, CpuBackend>(lt::M(tok.take(x)), tg));
  const auto gr = blk.backward(f.cache, lt::shard_as<Replicated, T, CpuBackend>(lt::M(tok.take(dy)), tg));
  const auto dense = dense_block(rb, x, dy);
  const auto &ro = dense.o, &rg = dense.g;
  std::vector<std::pair<std::string, double>> out;
  auto rel = [](const M& a, const M& b) { return (a - b).norm() / b.norm(); };
  auto local = [&](const std::string& n, const auto& got, const M& want) {
    out.emplace_back(n, rel(to_dense(got).template cast<double>(), tok.take(want)));
  };
  auto summed = [&](const std::string& n, const auto& got, const M& want) {  // all_reduce over cp, then against the dense
    M d = to_dense(got).template cast<double>();
    cg.all_reduce(d.data(), static_cast<std::size_t>(d.size()));
    out.emplace_back(n, rel(d, want));
  };
  local("y", f.y, ro.y);
  local("dx", gr.dx, rg.dx);
  const Index hd = lt::kHidden / lt::kHeads;
  summed("ln1.dgamma", gr.params.ln1.dgamma, rg.ln1.dgamma);
  summed("ln2.dgamma", gr.params.ln2.dgamma, rg.ln2.dgamma);
  summed("attn.dwqkv", gr.params.attn.qkv.dw, ref::qkv_physical(rg.attn.dwq, rg.attn.dwk, rg.attn.dwv, lt::kHeads, bc.groups, hd, tp));
  summed("attn.dwo", gr.params.attn.proj.dw, rg.attn.dwo);
  summed("mlp.dw2", gr.params.mlp.fc2.dw, rg.mlp.dw2);
  if (bc.bias) {
    summed("attn.dbqkv", *gr.params.attn.qkv.db, ref::qkv_physical(rg.attn.dbq, rg.attn.dbk, rg.attn.dbv, lt::kHeads, bc.groups, hd, tp));
    summed("mlp.db1", *gr.params.mlp.fc1.db, bc.act == nn::Activation::swiglu ? ref::swiglu_physical(rg.mlp.db1, rg.mlp.dbu, tp) : rg.mlp.db1);
  }
  summed("mlp.dw1", gr.params.mlp.fc1.dw, bc.act == nn::Activation::swiglu ? ref::swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, tp) : rg.mlp.dw1);
  return out;
}

// Compiled in test_context_parallel_block_double.cpp and test_context_parallel_block_float.cpp.
using Errors = std::vector<std::pair<std::string, double>>;
extern template Errors block_cp_errors<double>(ThreadComm&, int, int, const lt::BlockCase&, nn::CpAlgo);
extern template Errors block_cp_errors<float>(ThreadComm&, int, int, const lt::BlockCase&, nn::CpAlgo);

}  // namespace cpb
