// The running bound (precision/running.hpp) — the dense twins of reference/dense_layers.hpp
// evaluated over precision::Running<f32> — against float programs that really round:
//   (1) each rule holds for float arithmetic over random magnitudes and summation orders, and a
//       dot product's running bound is the derived product bound of precision/bounds.hpp;
//   (2) the library's layers at TP 1–4 (threads) in float, bf16 and fp16 (16-bit storage, fp32
//       arithmetic; the twin under a StorageScope), each fed the dense twin's inputs, stay within
//       the bound on every output and gradient, and the bound is not vacuous (pooled medians in
//       docs/verify.md, "Through a layer: the running bound");
//   (3) four tensor-parallel bugs, injected in float and in bf16, exceed it by far on the tensor
//       where they happen: a row-parallel bias added before the reduction, the sequence-parallel
//       norm weight's gradient not all-reduced (Megatron-LM #1446), the loss divided by TP twice,
//       a dropout mask that differs between TP ranks.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "shardalg/nn.hpp"
#include "shardalg/precision/bounds.hpp"
#include "shardalg/precision/running.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "running_support.hpp"
#include "testing.hpp"

namespace {

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
RM run(const M& m) { return ref::cast<R>(m); }


/// This rank's share of m (values of E) as Sharded<E, L>.
template <class L, class E = float>
Sharded<E, L> shard_f(const M& m, const Group& g) {
  if constexpr (std::is_same_v<E, float>) return shard<L>(testing::Mat<float>(m.cast<float>()), g);
  else return nn::from_global<E, L, CpuBackend>(m.rows(), m.cols(), g, [&](Index i, Index j) { return m(i, j); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// (1) The rules against float arithmetic
// ---------------------------------------------------------------------------------------------

TEST_CASE("running bound: sums in any order, products, and the library functions, against float") {
  std::mt19937_64 gen(7);
  double worst = 0;
  for (int k : {1, 2, 7, 64, 1000}) {
    for (double scale : {1e-2, 1.0, 1e3}) {
      std::uniform_real_distribution<double> u(-scale, scale);
      std::vector<float> x(static_cast<std::size_t>(k)), y(x.size());
      for (auto& v : x) v = static_cast<float>(u(gen));
      for (auto& v : y) v = static_cast<float>(u(gen));
      R acc = 0.0;  // an exact zero: not a term of the sum
      long double exact = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        acc += R(x[i]) * R(y[i]);
        exact += static_cast<long double>(x[i]) * y[i];
      }
      // Three orders of the same float dot product: forward, backward, pairwise.
      float fwd = 0, bwd = 0;
      for (std::size_t i = 0; i < x.size(); ++i) fwd += x[i] * y[i];
      for (std::size_t i = x.size(); i-- > 0;) bwd += x[i] * y[i];
      std::vector<float> t(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) t[i] = x[i] * y[i];
      while (t.size() > 1) {
        std::vector<float> n;
        for (std::size_t i = 0; i + 1 < t.size(); i += 2) n.push_back(t[i] + t[i + 1]);
        if (t.size() % 2) n.push_back(t.back());
        t = n;
      }
      for (float got : {fwd, bwd, t[0]}) {
        const double r = static_cast<double>(std::abs(static_cast<long double>(got) - exact)) / acc.bound();
        CHECK_MESSAGE(r <= 1.0, "k=" << k << " scale=" << scale << " ratio " << r);
        worst = std::max(worst, r);
      }
      // The same bound as the derived product bound (bounds.hpp) of the 1 × k by k × 1 product.
      M a(1, k), b(k, 1);
      for (int i = 0; i < k; ++i) a(0, i) = x[static_cast<std::size_t>(i)], b(i, 0) = y[static_cast<std::size_t>(i)];
      const double pb = pr::product_bound(a, b, {pr::Format::f32, pr::Format::f32})(0, 0);
      CHECK(acc.bound() <= 1.01 * pb);
      CHECK(acc.bound() >= 0.5 * pb);
    }
  }
  MESSAGE("dot products: worst error ÷ running bound " << worst);
  CHECK(worst >= 1e-3);  // not vacuous at k = 1

  // A composite of every rule, x carrying an error from a float product: f = tanh(x)·sqrt(x² + 1)
  // / (1 + exp(−x)) + log(2 + cosh(x)) − erfc(x), in float with the std functions.
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> ratios;
  for (int i = 0; i < 2000; ++i) {
    const float p = static_cast<float>(u(gen)), q = static_cast<float>(u(gen) / 4);
    const float xf = p * q;
    const R x = R(p) * R(q);
    const R f = tanh(x) * sqrt(x * x + R(1.0)) / (R(1.0) + exp(-x)) + log(R(2.0) + cosh(x)) - erfc(x);
    const float ff = std::tanh(xf) * std::sqrt(xf * xf + 1.0f) / (1.0f + std::exp(-xf)) + std::log(2.0f + std::cosh(xf)) -
                     std::erfc(xf);
    ratios.push_back(std::abs(static_cast<double>(ff) - f.value()) / f.bound());
  }
  const double mx = *std::max_element(ratios.begin(), ratios.end());
  MESSAGE("composite of every rule: max error ÷ bound " << mx << ", median " << Pool::median(ratios));
  CHECK(mx <= 1.0);
  CHECK(Pool::median(ratios) >= 1e-3);
}

TEST_CASE("running bound: a constant the format cannot hold is rounded; a divisor or log argument "
          "within its own error is a PrecisionError naming the values") {
  CHECK(R(0.5).bound() == 0.0);
  CHECK(R(0.1).bound() == doctest::Approx(0.1 * R::u));
  CHECK(pr::Running<pr::Format::f64>(0.1).bound() == 0.0);
  const R shaky = R::with_error(1.0, 2.0);
  CHECK_THROWS_WITH_AS(R(1.0) / shaky, "precision::Running: a divisor 1 whose error bound 2 is not below its magnitude",
                       pr::PrecisionError);
  CHECK_THROWS_WITH_AS(log(shaky), "precision::Running: log of 1 whose error bound 2 is not below it", pr::PrecisionError);
  // Scaling by a power of two is exact and keeps a sum open.
  const R s = R(1.0) + R(2.0) + R(3.0);
  CHECK((s * R(0.5)).terms() == 3);
  CHECK((s * R(0.5)).bound() == doctest::Approx(0.5 * s.bound()));
  // Rounding to bf16 storage adds u(bf16)·|v| (η aside).
  CHECK(pr::round_to(R(1.0), pr::Format::bf16).bound() == doctest::Approx(std::ldexp(1.0, -8)));
}

// ---------------------------------------------------------------------------------------------
// (2) The library's layers in float, per layer, at TP 1–4
// ---------------------------------------------------------------------------------------------

namespace {

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

}  // namespace

// float: every tensor in fp32. bf16 and fp16: stored in 16 bits, every product and reduction in
// fp32 (the CPU backend converts, computes in float, rounds each output once), the all-reduce in
// rank order with each add rounded; the twin over Running<f32> under a StorageScope of that format.
TEST_CASE_TEMPLATE("running bound: the MLP, LayerNorm under SP and attention, TP 1-4, within the bound", E, float,
                   Eigen::bfloat16, Eigen::half) {
  Pool pool;
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    const pr::StorageScope scope(storage_of<E>(p));
    for (auto act : {nn::Activation::gelu_tanh, nn::Activation::swiglu}) {
      const auto c = mlp_case<E>(act, 100 + static_cast<std::uint64_t>(act));
      const auto rb = ref::cast<R>(c.rm);
      const auto fo = ref::mlp_forward(rb, run(c.x));
      const auto go = ref::mlp_backward(rb, run(c.x), fo, run(c.dz));
      const auto outs = testing::per_rank<std::map<std::string, M>>(p, [&](const Group& g) { return run_mlp<E>(c, act, g); });
      for (const auto& o : outs) {
        CHECK(pool.add("mlp.z", o.at("z"), fo.z) <= 1.0);
        CHECK(pool.add("mlp.dx", o.at("dx"), go.dx) <= 1.0);
        CHECK(pool.add("mlp.dw2", o.at("dw2"), go.dw2) <= 1.0);
        CHECK(pool.add("mlp.db2", o.at("db2"), go.db2) <= 1.0);
        if (o.count("dw1")) CHECK(pool.add("mlp.dw1", o.at("dw1"), go.dw1) <= 1.0);
      }
    }
    {  // LayerNorm on X[Row] (sequence parallelism): dgamma Partial, then all-reduced
      M gamma = rnd<E>(1, kH, 31, 0.25).array() + 1.0;  // then rounded to E again
      gamma = gamma.unaryExpr([](double v) { return static_cast<double>(static_cast<float>(E(static_cast<float>(v)))); });
      const M beta = rnd<E>(1, kH, 32), x = rnd<E>(kT, kH, 33), dy = rnd<E>(kT, kH, 34);
      const ref::NormOf<R> rn{run(gamma), run(beta), true, kEps};
      const auto fo = ref::norm_forward(rn, run(x));
      const auto go = ref::norm_backward(rn, fo, run(dy));
      const auto outs = testing::per_rank<std::map<std::string, M>>(p, [&](const Group& g) {
        const auto ln = nn::LayerNorm<E>::from_dense(gamma, &beta, nn::NormKind::layer, g, E(static_cast<float>(kEps)));
        const auto f = ln.forward(shard_f<RowSharded, E>(x, g));
        const auto gr = ln.backward(f.cache, shard_f<RowSharded, E>(dy, g));
        return std::map<std::string, M>{{"y", dense(f.y)}, {"dx", dense(gr.dx)}, {"dgamma", dense(all_reduce(gr.params.dgamma))}};
      });
      for (const auto& o : outs) {
        CHECK(pool.add("ln.y", o.at("y"), fo.y) <= 1.0);
        CHECK(pool.add("ln.dx", o.at("dx"), go.dx) <= 1.0);
        CHECK(pool.add("ln.dgamma", o.at("dgamma"), go.dgamma) <= 1.0);
      }
    }
    {  // attention, 12 heads of 2 (MHA), with biases
      const Index d = kH / kHeads;
      const ref::Attn a{rnd<E>(kH, kH, 41, 0.5), rnd<E>(1, kH, 42, 0.5), rnd<E>(kH, kH, 43, 0.5), rnd<E>(1, kH, 44, 0.5),
                        rnd<E>(kH, kH, 45, 0.5), rnd<E>(1, kH, 46, 0.5), rnd<E>(kH, kH, 47, 0.3), rnd<E>(1, kH, 48, 0.5),
                        kHeads,                  kHeads,                 kSeq};
      const M x = rnd<E>(kT, kH, 49), dz = rnd<E>(kT, kH, 50);
      const auto ra = ref::cast<R>(a);
      const auto fo = ref::attn_forward(ra, run(x));
      const auto go = ref::attn_backward(ra, run(x), fo, run(dz));
      const auto outs = testing::per_rank<std::map<std::string, M>>(p, [&](const Group& g) {
        const nn::AttentionMasters<M> m{&a.wq, &a.bq, &a.wk, &a.bk, &a.wv, &a.bv, &a.wo, &a.bo};
        const auto at = nn::Attention<E>::from_dense(nn::AttentionConfig{kH, kHeads, kHeads, kSeq, true}, m, g);
        const auto f = at.forward(shard_f<Replicated, E>(x, g));
        const auto gr = at.backward(f.cache, shard_f<Replicated, E>(dz, g));
        return std::map<std::string, M>{{"z", dense(f.z)}, {"dx", dense(gr.dx)}, {"dwo", dense(gr.params.proj.dw)}};
      });
      (void)d;
      for (const auto& o : outs) {
        CHECK(pool.add("attn.z", o.at("z"), fo.z) <= 1.0);
        CHECK(pool.add("attn.dx", o.at("dx"), go.dx) <= 1.0);
        CHECK(pool.add("attn.dwo", o.at("dwo"), go.dwo) <= 1.0);
      }
    }
  }
  for (const auto& [family, v] : pool.ratios) {
    const double mx = *std::max_element(v.begin(), v.end()), med = Pool::median(v);
    MESSAGE(pr::to_string(pr::format_of<E>) << " " << family << ": max error ÷ bound " << mx << ", median " << med);
    CHECK(med >= 1e-5);
  }
}

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
