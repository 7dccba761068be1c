// tests/precision/running_layers.hpp — the layer programs the running-bound tests run twice, once
// in the element type E through the library and once as the dense twin over Running<f32>: inputs
// rounded to E, the MLP case and its run on a group, a dense matrix shared as Sharded<E, L>.
// Included by test_running_{mlp,norm,attention,bugs}.cpp; check_medians ends each layer's test.
#pragma once

#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "running_support.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/precision/running.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "testing.hpp"

namespace running_layers {

using namespace shardalg;
namespace pr = shardalg::precision;
using R = pr::Running<pr::Format::f32>;
using ref::M;
using RM = ref::Mat<R>;
using running_support::dense, running_support::Pool, running_support::storage_of;

/// Uniform values in [−scale, scale), rounded to E (exact constants of an E program).
template <class E = float>
M rnd(Index r, Index c, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  M m(r, c);
  for (Index j = 0; j < c; ++j)
    for (Index i = 0; i < r; ++i) m(i, j) = static_cast<double>(static_cast<float>(E(static_cast<float>(u(gen)))));
  return m;
}
inline RM run(const M& m) { return ref::cast<R>(m); }


/// This rank's share of m (values of E) as Sharded<E, L>.
template <class L, class E = float>
Sharded<E, L> shard_f(const M& m, const Group& g) {
  if constexpr (std::is_same_v<E, float>) return shard<L>(testing::Mat<float>(m.cast<float>()), g);
  else return nn::from_global<E, L, CpuBackend>(m.rows(), m.cols(), g, [&](Index i, Index j) { return m(i, j); });
}


constexpr Index kT = 12, kH = 24, kF = 48, kHeads = 12, kSeq = 6, kV = 48;
constexpr double kEps = 1.0 / 131072;

struct MlpCase {
  ref::Mlp rm;
  M x, dz;
};
template <class E = float>
MlpCase mlp_case(nn::Activation act, std::uint64_t s) {
  const bool glu = act == nn::Activation::swiglu;
  return {ref::Mlp{rnd<E>(kH, kF, s + 1, 0.4), rnd<E>(1, kF, s + 2, 0.5), glu ? rnd<E>(kH, kF, s + 3, 0.4) : M(),
                   glu ? rnd<E>(1, kF, s + 4, 0.5) : M(), rnd<E>(kF, kH, s + 5, 0.3), rnd<E>(1, kH, s + 6, 0.5),
                   glu ? ref::Act::swiglu : ref::Act::gelu_tanh},
          rnd<E>(kT, kH, s + 7), rnd<E>(kT, kH, s + 8)};
}

/// The MLP on g, fc2's bias scaled by `bias_factor` (the bias added on every rank before the
/// all-reduce is the bias times P): z, dx and the weight gradients as dense matrices.
template <class E = float>
std::map<std::string, M> run_mlp(const MlpCase& c, nn::Activation act, const Group& g, double bias_factor = 1.0) {
  const bool glu = act == nn::Activation::swiglu;
  const M b2 = c.rm.b2 * bias_factor;
  const nn::MlpMasters<M> masters{&c.rm.w1, &c.rm.b1, glu ? &c.rm.wu : nullptr, glu ? &c.rm.bu : nullptr, &c.rm.w2, &b2};
  const auto mlp = nn::Mlp<E>::from_dense(nn::MlpConfig{kH, kF, act, true}, masters, g);
  const auto f = mlp.forward(shard_f<Replicated, E>(c.x, g));
  const auto gr = mlp.backward(f.cache, shard_f<Replicated, E>(c.dz, g));
  std::map<std::string, M> out{{"z", dense(f.z)}, {"dx", dense(gr.dx)}, {"dw2", dense(gr.params.fc2.dw)},
                               {"db2", dense(*gr.params.fc2.db)}};
  if (!glu) out["dw1"] = dense(gr.params.fc1.dw);
  return out;
}

/// Each family's error ÷ bound: its max reported, its median required ≥ 1e-5 (a bound that is
/// never approached would pass any program).
template <class E>
void check_medians(const Pool& pool) {
  for (const auto& [family, v] : pool.ratios) {
    const double mx = *std::max_element(v.begin(), v.end()), med = Pool::median(v);
    MESSAGE(pr::to_string(pr::format_of<E>) << " " << family << ": max error ÷ bound " << mx << ", median " << med);
    CHECK(med >= 1e-5);
  }
}

}  // namespace running_layers
