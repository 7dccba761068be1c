// Four tensor-parallel bugs, injected in float and in bf16, exceed the running bound by far on the
// tensor where they happen: a row-parallel bias added before the reduction, the sequence-parallel
// norm weight's gradient not all-reduced (Megatron-LM #1446), the loss divided by TP twice, a
// dropout mask that differs between TP ranks.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "running_layers.hpp"
#include "shardalg/nn/layers/cross_entropy.hpp"
#include "shardalg/nn/layers/dropout.hpp"
#include "shardalg/nn/layers/norm.hpp"

using namespace running_layers;

// ---------------------------------------------------------------------------------------------
// (3) Injected tensor-parallel bugs
// ---------------------------------------------------------------------------------------------

namespace {

/// Mean token cross-entropy of logits [T, V], written here from the definition; Σexp is split
/// over the vocabulary's ranks and reduced, each token's loss and the mean stored.
template <class S>
S cross_entropy(const ref::Mat<S>& logits, const std::vector<std::int64_t>& targets) {
  using ref::partial_round, ref::storage_round, std::exp, std::log, std::max;
  S total = S(0.0);
  for (Index i = 0; i < logits.rows(); ++i) {
    S mx = logits(i, 0);
    for (Index j = 1; j < logits.cols(); ++j) mx = max(mx, logits(i, j));
    S z = S(0.0);
    for (Index j = 0; j < logits.cols(); ++j) z += exp(S(logits(i, j) - mx));
    z = storage_round(partial_round(z));
    total += storage_round(S(log(z) + mx - logits(i, targets[static_cast<std::size_t>(i)])));
  }
  return storage_round(S(total / S(double(logits.rows()))));
}

/// How far above the bound a bug must land: float's bounds are 1e3 below a bug's O(1) error; a
/// 16-bit format's own rounding (2^−8 for bf16) leaves less room.
template <class E>
constexpr double kBugFloor = std::is_same_v<E, float> ? 1e3 : 10.0;

}  // namespace

TEST_CASE_TEMPLATE("running bound: four injected tensor-parallel bugs exceed it on their tensor", E, float,
                   Eigen::bfloat16) {
  std::map<std::string, double> worst;
  for (int p : {2, 4}) {
    CAPTURE(p);
    const pr::StorageScope scope(storage_of<E>(p));
    // A row-parallel bias added on every rank before the all-reduce: z holds P·b.
    const auto c = mlp_case<E>(nn::Activation::gelu_tanh, 200);
    const auto rb = ref::cast<R>(c.rm);
    const auto fo = ref::mlp_forward(rb, run(c.x));
    const auto bias =
        testing::per_rank<M>(p, [&](const Group& g) { return run_mlp<E>(c, nn::Activation::gelu_tanh, g, p).at("z"); });
    const double r_bias = pr::error_over_bound(bias[0], pr::values(fo.z), pr::bounds(fo.z));
    CHECK(r_bias > kBugFloor<E>);
    worst["bias added before the reduction (mlp.z)"] = std::max(worst["bias added before the reduction (mlp.z)"], r_bias);

    // The SP norm weight's gradient used without its all-reduce (#1446): rank 0's summand.
    M gamma = rnd<E>(1, kH, 61, 0.25).array() + 1.0;
    gamma = gamma.unaryExpr([](double v) { return static_cast<double>(static_cast<float>(E(static_cast<float>(v)))); });
    const M beta = rnd<E>(1, kH, 62), x = rnd<E>(kT, kH, 63), dy = rnd<E>(kT, kH, 64);
    const ref::NormOf<R> rn{run(gamma), run(beta), true, kEps};
    const auto nfo = ref::norm_forward(rn, run(x));
    const auto ngo = ref::norm_backward(rn, nfo, run(dy));
    const auto partial = testing::per_rank<M>(p, [&](const Group& g) {
      const auto ln = nn::LayerNorm<E>::from_dense(gamma, &beta, nn::NormKind::layer, g, E(static_cast<float>(kEps)));
      const auto f = ln.forward(shard_f<RowSharded, E>(x, g));
      const auto gr = ln.backward(f.cache, shard_f<RowSharded, E>(dy, g));
      return CpuBackend::to_host(gr.params.dgamma.local())
          .unaryExpr([](const E& v) { return static_cast<double>(static_cast<float>(v)); })
          .eval();
    });
    const double r_norm = pr::error_over_bound(partial[0], pr::values(ngo.dgamma), pr::bounds(ngo.dgamma));
    CHECK(r_norm > kBugFloor<E>);
    worst["SP norm dgamma not all-reduced"] = std::max(worst["SP norm dgamma not all-reduced"], r_norm);

    // The loss divided by TP twice: the vocabulary-parallel cross-entropy's mean ÷ P.
    const M logits = rnd<E>(kT, kV, 65, 3.0);
    std::vector<std::int64_t> targets;
    for (Index i = 0; i < kT; ++i) targets.push_back((i * 7 + 3) % kV);
    const R ce = cross_entropy(run(logits), targets);
    const auto losses = testing::per_rank<double>(p, [&](const Group& g) {
      const nn::VocabParallelCrossEntropy<E> xent(kV);
      return static_cast<double>(static_cast<float>(xent.forward(shard_f<ColSharded, E>(logits, g), targets).mean));
    });
    const double honest = std::abs(losses[0] - ce.value()) / ce.bound();
    CHECK(honest <= 1.0);
    MESSAGE(pr::to_string(pr::format_of<E>) << " P=" << p << ": the honest loss at error ÷ bound " << honest);
    // divided again by P, in the storage format as a program would
    const double twice = static_cast<double>(static_cast<float>(E(static_cast<float>(losses[0] / p))));
    const double r_loss = std::abs(twice - ce.value()) / ce.bound();
    CHECK(r_loss > kBugFloor<E>);
    worst["loss divided by TP twice"] = std::max(worst["loss divided by TP twice"], r_loss);

    // A dropout mask that differs between TP ranks (the seed offset by the rank): the replicas of
    // X[R] after dropout disagree; each rank's against the dense twin's mask.
    const M xd = rnd<E>(kT, kH, 66);
    const std::uint64_t seed = 0xD5, id = nn::tensor_id(3, nn::TensorKind::dropout);
    const auto yd = ref::dropout(run(xd), 0.25, seed, id);
    const auto masks = testing::per_rank<M>(p, [&](const Group& g) {
      const nn::Dropout drop(0.25, seed + static_cast<std::uint64_t>(g.rank()), id);
      return dense(drop.forward(shard_f<Replicated, E>(xd, g)));
    });
    CHECK(pr::error_over_bound(masks[0], pr::values(yd), pr::bounds(yd)) <= 1.0);
    double r_mask = 0;
    for (std::size_t r = 1; r < masks.size(); ++r)
      r_mask = std::max(r_mask, pr::error_over_bound(masks[r], pr::values(yd), pr::bounds(yd)));
    CHECK(r_mask > kBugFloor<E>);
    worst["dropout mask differs between TP ranks"] = std::max(worst["dropout mask differs between TP ranks"], r_mask);
  }
  for (const auto& [bug, r] : worst) MESSAGE(pr::to_string(pr::format_of<E>) << " " << bug << ": error ÷ bound " << r);
}
