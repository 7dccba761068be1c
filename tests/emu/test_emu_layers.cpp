// tests/emu/test_emu_layers.cpp — the layers on the emulated-device backend: tests/layers/cases.hpp
// on EmuBackend (linear, MLP ×3 activations, LayerNorm and RMSNorm on R/Row/C, dropout on every
// layout, attention MHA and GQA, the block), float at TP 1, 2, 4 and double at TP 2, against the
// dense double references at the CPU suites' bounds; after every run no device block is left
// open and none is leaked (the registry's counts).
#include <doctest/doctest.h>

#include <vector>

#include "cases.hpp"
#include "shardalg/emu.hpp"

namespace {
using namespace shardalg;
using emu::EmuBackend;
using emu::EmuComm;
using emu::Registry;

/// No device block open, none alive: every guard closed, every matrix and staged message freed.
void expect_clean() {
  CHECK_EQ(Registry::get().open(), 0u);
  CHECK_EQ(Registry::get().live(), 0u);
}
}  // namespace

namespace {
/// Run fn(group) on p emu ranks; every rank's checks within the CPU suites' bound for T.
template <class T, class Fn>
void expect_layers(int p, Fn fn) {
  std::vector<lt::Checks> results(static_cast<std::size_t>(p));
  emu::run_emu_ranks(p, [&](EmuComm& c) { results[static_cast<std::size_t>(c.rank())] = fn(Group(c)); });
  for (int r = 0; r < p; ++r)
    for (const auto& c : results[static_cast<std::size_t>(r)])
      CHECK_MESSAGE(c.err.within(lt::tol<T>), c.name << " p=" << p << " rank=" << r << ": " << c.err);
  CHECK(!results[0].empty());
  expect_clean();
}
}  // namespace

TEST_CASE("emu layers: linear, MLP, norms, dropout, attention and the block equal the dense twins (fp32, TP 1/2/4)") {
  using T = float;
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    expect_layers<T>(p, [](const Group& g) { return lt::case_linear<T, EmuBackend>(g); });
    for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf, nn::Activation::swiglu})
      expect_layers<T>(p, [&](const Group& g) { return lt::case_mlp<T, EmuBackend>(g, act); });
    for (auto kind : {nn::NormKind::layer, nn::NormKind::rms})
      expect_layers<T>(p, [&](const Group& g) { return lt::case_norm<T, EmuBackend>(g, kind); });
    expect_layers<T>(p, [](const Group& g) { return lt::case_dropout<T, EmuBackend>(g); });
    for (Index groups : lt::valid_groups(p)) {
      CAPTURE(groups);
      expect_layers<T>(p, [&](const Group& g) { return lt::case_attention<T, EmuBackend>(g, groups); });
    }
    expect_layers<T>(p, [&](const Group& g) { return lt::case_attention<T, EmuBackend>(g, p, 0.25); });  // attention dropout
    for (const auto& bc : lt::block_cases(p))
      expect_layers<T>(p, [&](const Group& g) { return lt::case_block<T, EmuBackend>(g, bc); });
  }
}

TEST_CASE("emu layers: the block and the norms in fp64 at TP 2") {
  using T = double;
  for (auto kind : {nn::NormKind::layer, nn::NormKind::rms})
    expect_layers<T>(2, [&](const Group& g) { return lt::case_norm<T, EmuBackend>(g, kind); });
  for (const auto& bc : lt::block_cases(2))
    expect_layers<T>(2, [&](const Group& g) { return lt::case_block<T, EmuBackend>(g, bc); });
}
