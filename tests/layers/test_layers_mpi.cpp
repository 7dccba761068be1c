// tests/layers/test_layers_mpi.cpp — the same layer cases as test_layers.cpp, on MPI_COMM_WORLD
// (run under mpirun -np 2 and -np 4): every layer's output and gradients against the dense
// reference, float and double, and the ledger of one block.
#include <mpi.h>

#include <doctest/doctest.h>

#include "case_instances.hpp"  // the cases, compiled in test_layers_{double,float}.cpp
#include "cp_cases.hpp"
#include "shardalg/comm/mpi.hpp"

namespace {
using namespace lt;

Group world() { return Group(MpiComm(MPI_COMM_WORLD)); }

template <class T>
void expect(const Checks& cs) {
  CHECK(!cs.empty());
  for (const auto& c : cs) CHECK_MESSAGE(c.err.within(tol<T>), c.name << " p=" << world().size() << ": " << c.err);
}
}  // namespace

TEST_CASE_TEMPLATE("MPI: linear layers, MLP, norms and dropout equal the dense layers", T, float, double) {
  const Group g = world();
  expect<T>(case_linear<T>(g));
  for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf, nn::Activation::swiglu})
    expect<T>(case_mlp<T>(g, act));
  for (auto kind : {nn::NormKind::layer, nn::NormKind::rms}) expect<T>(case_norm<T>(g, kind));
  expect<T>(case_dropout<T>(g));
}

TEST_CASE_TEMPLATE("MPI: attention (MHA, GQA) and the transformer block equal the dense ones", T, float, double) {
  const Group g = world();
  for (Index groups : valid_groups(g.size())) {
    CAPTURE(groups);
    expect<T>(case_attention<T>(g, groups));
  }
  for (const auto& bc : block_cases(g.size())) expect<T>(case_block<T>(g, bc));
}

TEST_CASE("MPI: ledger of one block: 2 all-reduces of T·h forward, 2 backward, nothing else") {
  const std::size_t th = kTokens * kHidden;
  const auto s = ledger_case<double>(world(), {nn::NormKind::layer, nn::Activation::gelu_tanh, true, kHeads, 0.1});
  CHECK(s.fwd_all_reduce == 2);
  CHECK(s.fwd_total == 2);
  CHECK(s.bwd_all_reduce == 2);
  CHECK(s.bwd_total == 2);
  CHECK(s.fwd_elements == std::vector<std::size_t>{th, th});
  CHECK(s.bwd_elements == std::vector<std::size_t>{th, th});
  CHECK(s.pln_fwd_elements == 2 * kTokens);
  CHECK(s.pln_bwd_elements == 2 * kTokens);
  CHECK(s.total == 6);
}

TEST_CASE_TEMPLATE("MPI: attention dropout (layer and block) equals the dense twins", T, float, double) {
  const Group g = world();
  for (Index groups : valid_groups(g.size())) expect<T>(case_attention<T>(g, groups, 0.25));
  for (auto bc : block_cases(g.size())) {
    bc.attn_dropout = 0.2;
    expect<T>(case_block<T>(g, bc));
  }
}

TEST_CASE("MPI: context parallelism — ring and all-to-all attention equal causal attention on the whole sequence") {
  Group g = world();
  const int cp = g.size();
  const cpt::Shape s{2, 4 * cp, 4, 4, 3};
  for (bool overlap : {true, false}) {  // the receives posted before the compute, or waited first
    const auto r = cpt::ring_case<double>(g, s, overlap);
    CHECK(r.o < 1e-13);
    CHECK(r.dq < 1e-12);
    CHECK(r.dk < 1e-12);
    CHECK(r.dv < 1e-12);
    CHECK(r.blocks == 2 * cp + 1);
  }
  const auto u = cpt::ulysses_case<double>(g, s);
  CHECK(u.r.o < 1e-13);
  CHECK(u.r.dk < 1e-12);
  CHECK(u.vs_ring < 1e-12);
}

TEST_CASE("MPI: context parallelism in bf16 — ring and all-to-all attention within their derived bound per element") {
  // K|V travel as 16-bit bits, the dK|dV partial sums in fp32 (nn/layers/ring_attention.hpp).
  Group g = world();
  const int cp = g.size();
  const cpt::Shape s{2, 4 * cp, 4, 4, 8};
  for (bool ulysses : {false, true}) {
    CAPTURE(ulysses);
    const auto r = cpt::case_16bit<Eigen::bfloat16>(g, s, ulysses, 11);
    INFO("error ÷ bound, largest: O ", r.o_max, ", dQ ", r.dq_max, ", dK ", r.dk_max, ", dV ", r.dv_max);
    CHECK(r.o_max <= 1.0);
    CHECK(r.dq_max <= 1.0);
    CHECK(r.dk_max <= 1.0);
    CHECK(r.dv_max <= 1.0);
    CHECK(r.o_med >= 1e-3);
    CHECK(r.grad_med >= 1e-3);
  }
}
