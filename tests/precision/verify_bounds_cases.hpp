// Shared by the test_verify_bounds*.cpp TUs (split so that each stays under 1 GB of compiler
// memory: the programs over eight element types in one TU took 2.2 GB): the helpers, the op
// program, a transformer block and an MLP sub-layer with injectable bugs.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include <shardalg/autodiff.hpp>
#include <shardalg/autodiff/layers.hpp>
#include <shardalg/autodiff/verify.hpp>
#include <shardalg/precision/element.hpp>

#include "testing.hpp"

namespace vb {

using namespace shardalg;
namespace pr = shardalg::precision;
using Dense = ad::Named::mapped_type;

inline Dense rnd(Index r, Index c, std::uint64_t seed) { return testing::random_real<double>(r, c, seed); }

template <class Bd>
using elem_of = typename std::remove_cvref_t<Bd>::element_type;
template <class Bd>
constexpr bool is_bound_run = pr::is_bound_element_v<elem_of<Bd>>;

/// Every check passes; returns the largest ratio of the report. For the rounding types (not
/// double, whose reference is itself a double evaluation: ratio 0 wherever the two orders agree)
/// each tensor whose largest ratio is below 1e-3 is reported, so that a vacuous bound shows.
template <class T>
double check_passes(const ad::VerifyReport& r) {
  INFO(r.text());
  CHECK(r.pass());
  REQUIRE(r.checks.size() > 3);
  double worst = 0;
  for (const auto& c : r.checks) {
    worst = std::max(worst, c.error);
    if constexpr (!std::is_same_v<T, double>)
      if (c.error < 1e-3) MESSAGE("small: ", c.name, " at P = ", c.world, ": ", c.error);
  }
  return worst;
}

inline double worst_of(const ad::VerifyReport& r) {
  double w = 0;
  for (const auto& c : r.checks) w = std::max(w, c.error);
  return w;
}

/// The op program: matmul forms, f and g, elementwise maps, softmax, SwiGLU, dropout, sums.
inline const ad::Named& op_inputs() {
  static const ad::Named in{{"a", rnd(12, 12, 1)},  {"w", rnd(12, 24, 2)}, {"v", rnd(24, 12, 3)},
                            {"x", rnd(12, 24, 4)},  {"y", rnd(12, 24, 5)}, {"b", rnd(1, 24, 6)},
                            {"p", rnd(12, 24, 7)}};
  return in;
}
inline const auto op_program = [](auto& b) {
  auto a = b.template input<Invariant>("a");
  auto w = b.template input<ColSharded>("w");
  auto v = b.template input<RowSharded>("v");
  auto x = b.template input<RowSharded>("x");
  auto y = b.template input<ColSharded>("y");
  auto bias = b.template input<ColSharded>("b");
  auto p = b.template input<Partial>("p");
  auto h = ad::add_bias(ad::matmul(ad::copy_to(a), w), bias);  // A[R] · W[C] + b[C] → H[C]
  b.output("mlp", ad::all_reduce<Invariant>(ad::matmul(ad::map(h, ad::gelu), v)));  // H[C] · V[Row] → Partial → g
  b.output("erf.C", ad::map(y, ad::gelu_erf));
  b.output("silu.Row", ad::map(x, ad::silu));
  b.output("swiglu.Row", ad::swiglu(x));
  b.output("softmax.Row", ad::softmax_rows(x));
  b.output("had.C", ad::hadamard(y, h));
  b.output("lin.Row", 2.0 * x - 0.5 * x);
  b.output("drop.C", ad::dropout(y, 0.25, 11, 3));
  b.output("sum.P", ad::sum(p));
  b.output("rowsum.C", ad::row_sum(y));
};

/// A transformer block (LayerNorm, MHA with bias, GeLU MLP, dropout), its inputs dense in the
/// layouts of autodiff/layers.hpp: Wqkv unit-major ([q | k | v] per head), so the same matrix
/// shards by whole heads at every P dividing 4.
inline nn::BlockConfig block_config() {
  nn::BlockConfig c;
  c.hidden = 16, c.heads = 4, c.seq = 4, c.ffn = 32, c.eps = 1e-5, c.dropout = 0.1, c.dropout_seed = 5, c.layer = 1;
  return c;
}
inline const ad::Named& block_inputs() {
  const auto c = block_config();
  const Index h = c.hidden, f = c.ffn;
  static const ad::Named in{{"x", rnd(8, h, 21)},        {"ln1.g", rnd(1, h, 22)},  {"ln1.b", rnd(1, h, 23)},
                            {"qkv.w", rnd(h, 3 * h, 24)}, {"qkv.b", rnd(1, 3 * h, 25)}, {"proj.w", rnd(h, h, 26)},
                            {"proj.b", rnd(1, h, 27)},    {"ln2.g", rnd(1, h, 28)},  {"ln2.b", rnd(1, h, 29)},
                            {"fc1.w", rnd(h, f, 30)},     {"fc1.b", rnd(1, f, 31)},  {"fc2.w", rnd(f, h, 32)},
                            {"fc2.b", rnd(1, h, 33)}};
  return in;
}
inline const auto block_program = [](auto& b) {
  using T = elem_of<decltype(b)>;
  const auto c = block_config();
  auto col = [&](const std::string& n) {
    return ad::ColumnParams<T>{b.template input<ColSharded>(n + ".w"), b.template input<ColSharded>(n + ".b")};
  };
  auto row = [&](const std::string& n) {
    return ad::RowParams<T, Invariant>{b.template input<RowSharded>(n + ".w"), b.template input<Invariant>(n + ".b")};
  };
  auto norm = [&](const std::string& n) {
    return ad::NormParams<T, Invariant>{b.template input<Invariant>(n + ".g"), b.template input<Invariant>(n + ".b"),
                                        T(c.eps)};
  };
  auto x = b.template input<Invariant>("x");
  const ad::BlockParams<T, Invariant> p{norm("ln1"), col("qkv"), row("proj"), norm("ln2"), col("fc1"), row("fc2")};
  const nn::Dropout da(c.dropout, c.dropout_seed, nn::tensor_id(c.layer, nn::TensorKind::dropout_attn));
  const nn::Dropout dm(c.dropout, c.dropout_seed, nn::tensor_id(c.layer, nn::TensorKind::dropout_mlp));
  b.output("y", ad::block(x, p, c, da, dm));
};

/// An MLP sub-layer with a bug in the run only (the bound is the correct program's):
///   x[I] → LN → f → ·W1[C] + b1 → GeLU → dropout → ·W2[Row] → Partial → g → + b2 → + x
/// Outputs: n (the norm), g (the reduced partial), z (after the bias), y.
enum class Bug { none, scaled_twice, dropout_per_rank, bias_before_reduction, eps_4x };
/// x of U(−1, 1) rows; `small`: 0.1·U(−1, 1) (σ² ≈ 0.003 against ε = 0.01, so that ε matters).
inline ad::Named mlp_inputs(bool small = false) {
  return {{"x", (small ? 0.1 : 1.0) * rnd(8, 16, 41)}, {"g", rnd(1, 16, 42)},  {"beta", rnd(1, 16, 43)},
          {"w1", rnd(16, 32, 44)},                     {"b1", rnd(1, 32, 45)}, {"w2", rnd(32, 16, 46)},
          {"b2", rnd(1, 16, 47)}};
}
inline auto mlp_program(Bug bug) {
  return [bug](auto& b) {
    using T = elem_of<decltype(b)>;
    const bool run = !is_bound_run<decltype(b)>;  // the bug is in the run, never in its bound
    const int P = b.group().size(), r = b.group().rank();
    auto x = b.template input<Invariant>("x");
    auto g = b.template input<Invariant>("g");
    auto beta = b.template input<Invariant>("beta");
    auto w1 = b.template input<ColSharded>("w1");
    auto b1 = b.template input<ColSharded>("b1");
    auto w2 = b.template input<RowSharded>("w2");
    auto b2 = b.template input<Invariant>("b2");
    auto n = ad::layer_norm(x, g, beta, T(run && bug == Bug::eps_4x ? 4e-2 : 1e-2));
    auto h = ad::map(ad::add_bias(ad::matmul(ad::copy_to(n), w1), b1), ad::gelu);
    const std::uint64_t seed = run && bug == Bug::dropout_per_rank ? 9 + static_cast<std::uint64_t>(r) : 9;
    auto part = ad::matmul(ad::dropout(h, 0.2, seed, 1), w2);  // A[C] · W2[Row] → Partial
    if (run && bug == Bug::scaled_twice) part = (1.0 / P) * part;  // a partial already ÷ P, ÷ P again
    auto red = ad::all_reduce<Invariant>(part);
    auto z = ad::add_bias(red, b2);
    // add_bias on the Partial is a compile error (E111); its effect, the bias counted by every rank:
    if (run && bug == Bug::bias_before_reduction)
      for (int k = 1; k < P; ++k) z = ad::add_bias(z, b2);
    b.output("n", n);
    b.output("g", red);
    b.output("z", z);
    b.output("y", x + z);
  };
}

/// The largest error ÷ bound of `name` at world p.
inline double ratio_of(const ad::VerifyReport& r, const std::string& name, int p) {
  for (const auto& c : r.checks)
    if (c.name == name && c.world == p) return c.error;
  FAIL("no check ", name, " at P = ", p);
  return 0;
}


/// The op program in T at P = 1, 2, 3, 4 against its bounds: every check passes.
template <class T>
void check_op_program() {
  const auto r = ad::verify<T>(op_program, op_inputs(), {.worlds = {2, 3, 4}, .fd_samples = 0, .bounds = true});
  CHECK(r.bounds);
  const double worst = check_passes<T>(r);
  MESSAGE(pr::to_string(pr::format_of<T>), ": largest error ÷ bound ", worst);
}

/// Four bugs injected into the MLP sub-layer's run in T (not into its bound), each measured on the
/// tensor where it acts; the honest run passes.
template <class T>
void check_bugs() {
  const ad::VerifyOptions o{.worlds = {2}, .fd_samples = 0, .bounds = true};
  const auto honest = ad::verify<T>(mlp_program(Bug::none), mlp_inputs(), o);
  CHECK(honest.pass());
  const double clean = worst_of(honest);
  // The least ratio each bug must reach: float's bounds sit ~1e-7 of the values, so an O(1) bug is
  // 10^3–10^5 × its bound; bf16's worst-case bound through two GEMMs of random signs is ~30 % of
  // |g| (docs/verify.md), so a bug of the size of g clears it by 3× only, and the doubled bias
  // (|b| ≈ 0.5) stays inside z's bound (0.74×): reported, not asserted.
  constexpr bool bf = std::is_same_v<T, Eigen::bfloat16>;
  struct Case {
    Bug bug;
    const char* name;
    const char* tensor;
    double least;
  };
  for (const auto& [bug, name, tensor, least] :
       {Case{Bug::scaled_twice, "a partial scaled by 1/P twice", "g", bf ? 2.0 : 1e3},
        Case{Bug::dropout_per_rank, "the dropout mask differing between ranks", "g", bf ? 2.0 : 1e3},
        Case{Bug::bias_before_reduction, "the bias added by every rank", "z", bf ? 0.0 : 1e3},
        Case{Bug::eps_4x, "LayerNorm's ε 4× too large", "n", bf ? 10.0 : 1e3}}) {
    const auto r = ad::verify<T>(mlp_program(bug), mlp_inputs(bug == Bug::eps_4x), o);
    const double at = ratio_of(r, tensor, 2);
    MESSAGE(std::string(pr::to_string(pr::format_of<T>)), ", ", std::string(name), ": ", std::string(tensor), " at P = 2 is ", at,
            "× its bound (the honest run's largest: ", clean, ")");
    if (least > 0) {
      CHECK(!r.pass());
      CHECK(at > least);
    }
  }
}

}  // namespace vb
