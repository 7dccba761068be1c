// ParallelLayerNorm on X[C] (each rank a block of every token's features) against its one-pass
// twin over precision::Running: the statistics are μ = Σx/h and σ² = Σx²/h − μ², the sums split
// between the feature blocks and all-reduced — the algorithm the layer runs, not the two-pass
// LayerNorm's. In bf16 and fp16 the layer keeps the sums, their all-reduce and x̂ in fp32 and rounds
// each output once; the twin rounds the same outputs (a StorageScope of the format).
//
//   (1) float, bf16, fp16 at TP 1–4, LayerNorm and RMSNorm, h = 37 (uneven blocks), inputs
//       centred and offset by 4 (σ² = Σx²/h − μ² then cancels about 50-fold): y, dx, dγ, dβ
//       within the bound, and the bound not vacuous (median error ÷ bound);
//   (2) the statistics kept in 16 bits — the block's sums computed in fp32 but stored, all-reduced
//       and turned into μ, σ² in the element type, the layer written with Kernels<CpuBackend>
//       on E — exceed it by far on y (each row's μ and σ² shifted: an absolute error on every
//       element, against bounds relative to |y|).
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
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

constexpr Index kT = 20, kH = 37;
constexpr double kEps = 1e-5;

/// A value of E, as a double.
template <class E>
double to_e(double v) {
  return static_cast<double>(static_cast<float>(E(static_cast<float>(v))));
}
/// offset + uniform[−scale, scale), rounded to E (exact inputs of an E program).
template <class E>
M rnd(Index r, Index c, std::uint64_t seed, double scale, double offset = 0.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  M m(r, c);
  for (Index j = 0; j < c; ++j)
    for (Index i = 0; i < r; ++i) m(i, j) = to_e<E>(offset + u(gen));
  return m;
}
template <class E>
Sharded<E, ColSharded> cols(const M& m, const Group& g) {
  return nn::from_global<E, ColSharded, CpuBackend>(m.rows(), m.cols(), g, [&](Index i, Index j) { return m(i, j); });
}

// ---- the one-pass twin ---------------------------------------------------------------------------
// Written from the definition in S. The sums stay open across the feature blocks (Running covers
// any order and any split between ranks); what the layer stores is rounded with ref::stored.
struct Twin {
  RM y, xhat, dx, dgamma, dbeta;
  ref::Vec<R> rstd;
};
Twin one_pass(const RM& x, const RM& gamma, const RM& beta, bool center, double eps, const RM& dy) {
  using std::sqrt;
  const Index t = x.rows(), n = x.cols();
  const R h = R(static_cast<double>(n));
  Twin o{RM(t, n), RM(t, n), RM(t, n), RM::Zero(1, n), RM::Zero(1, n), ref::Vec<R>(t)};
  for (Index i = 0; i < t; ++i) {
    R s1 = R(0.0), s2 = R(0.0);
    for (Index j = 0; j < n; ++j) {
      s1 += x(i, j);
      s2 += x(i, j) * x(i, j);
    }
    const R mu = center ? R(s1 / h) : R(0.0);
    const R var = s2 / h - mu * mu;
    o.rstd(i) = R(1.0) / sqrt(var + R(eps));
    for (Index j = 0; j < n; ++j) {
      o.xhat(i, j) = (x(i, j) - mu) * o.rstd(i);
      o.y(i, j) = center ? R(o.xhat(i, j) * gamma(0, j) + beta(0, j)) : R(o.xhat(i, j) * gamma(0, j));
    }
  }
  o.y = ref::stored<R>(std::move(o.y));
  o.xhat = ref::stored<R>(std::move(o.xhat));
  o.rstd = ref::stored<R>(RM(o.rstd));
  // Backward from the stored x̂ and rstd: g = dy ⊙ γ; dx = rstd·(g − Σg/h − x̂·Σ(g·x̂)/h) (RMSNorm
  // without Σg/h); dγ = Σ_tokens dy ⊙ x̂ and dβ = Σ_tokens dy, local to each rank's columns.
  for (Index i = 0; i < t; ++i) {
    R sg = R(0.0), sgx = R(0.0);
    for (Index j = 0; j < n; ++j) {
      const R gj = dy(i, j) * gamma(0, j);
      sg += gj;
      sgx += gj * o.xhat(i, j);
      o.dgamma(0, j) += dy(i, j) * o.xhat(i, j);
      o.dbeta(0, j) += dy(i, j);
    }
    for (Index j = 0; j < n; ++j) {
      const R gj = dy(i, j) * gamma(0, j);
      o.dx(i, j) = center ? R(o.rstd(i) * (gj - sg / h - o.xhat(i, j) * sgx / h)) : R(o.rstd(i) * (gj - o.xhat(i, j) * sgx / h));
    }
  }
  o.dx = ref::stored<R>(std::move(o.dx));
  o.dgamma = ref::stored<R>(std::move(o.dgamma));
  o.dbeta = ref::stored<R>(std::move(o.dbeta));
  return o;
}


struct Case {
  M x, dy, gamma, beta;
  double eps;  // the ε the layer holds: kEps rounded to E
};
template <class E>
Case make_case(std::uint64_t seed, double offset) {
  Case c{rnd<E>(kT, kH, seed, 1.0, offset), rnd<E>(kT, kH, seed + 1, 1.0), rnd<E>(1, kH, seed + 2, 0.25, 1.0),
         rnd<E>(1, kH, seed + 3, 0.5), to_e<E>(kEps)};
  return c;
}

}  // namespace

TEST_CASE_TEMPLATE("ParallelLayerNorm on X[C], TP 1-4: y, dx, dγ, dβ within the one-pass twin's bound", E, float,
                   Eigen::bfloat16, Eigen::half) {
  Pool pool;
  for (int p : {1, 2, 3, 4}) {
    const pr::StorageScope scope(storage_of<E>(p));
    for (auto kind : {nn::NormKind::layer, nn::NormKind::rms}) {
      const bool center = kind == nn::NormKind::layer;
      for (double offset : {0.0, 4.0}) {
        CAPTURE(p);
        CAPTURE(center);
        CAPTURE(offset);
        const Case c = make_case<E>(static_cast<std::uint64_t>(10 * p + (center ? 0 : 5)), offset);
        const Twin tw = one_pass(ref::cast<R>(c.x), ref::cast<R>(c.gamma), ref::cast<R>(c.beta), center, c.eps,
                                 ref::cast<R>(c.dy));
        const auto outs = testing::per_rank<std::map<std::string, M>>(p, [&](const Group& g) {
          const auto ln = nn::ParallelLayerNorm<E>::from_dense(c.gamma, center ? &c.beta : nullptr, kind, g,
                                                               E(static_cast<float>(kEps)));
          const auto f = ln.forward(cols<E>(c.x, g));
          const auto gr = ln.backward(f.cache, cols<E>(c.dy, g));
          std::map<std::string, M> r{{"y", dense(f.y)}, {"dx", dense(gr.dx)}, {"dgamma", dense(gr.params.dgamma)}};
          if (center) r["dbeta"] = dense(*gr.params.dbeta);
          return r;
        });
        for (const auto& o : outs) {
          CHECK(pool.add("y", o.at("y"), tw.y) <= 1.0);
          CHECK(pool.add("dx", o.at("dx"), tw.dx) <= 1.0);
          CHECK(pool.add("dgamma", o.at("dgamma"), tw.dgamma) <= 1.0);
          if (center) CHECK(pool.add("dbeta", o.at("dbeta"), tw.dbeta) <= 1.0);
        }
      }
    }
  }
  for (const auto& [name, v] : pool.ratios) {
    const double mx = *std::max_element(v.begin(), v.end()), med = Pool::median(v);
    MESSAGE(pr::to_string(pr::format_of<E>) << " ParallelLayerNorm " << name << ": max error ÷ bound " << mx
                                            << ", median " << med);
    CHECK(med >= 1e-3);
  }
}

TEST_CASE_TEMPLATE("ParallelLayerNorm: statistics kept in 16 bits exceed the one-pass bound on y", E, Eigen::bfloat16,
                   Eigen::half) {
  // The forward with every statistic stored in E: the block's (Σx, Σx²) rounded to E, their
  // all-reduce in E (each add rounded), μ and σ² rounded to E; x̂ and y from them in fp32.
  using K = nn::Kernels<CpuBackend>;
  for (int p : {1, 2, 4}) {
    for (double offset : {1.0, 4.0}) {
      CAPTURE(p);
      CAPTURE(offset);
      const pr::StorageScope scope(storage_of<E>(p));
      const Case c = make_case<E>(70 + static_cast<std::uint64_t>(p), offset);
      const Twin tw = one_pass(ref::cast<R>(c.x), ref::cast<R>(c.gamma), ref::cast<R>(c.beta), true, c.eps,
                               ref::cast<R>(c.dy));
      const auto ys = testing::per_rank<M>(p, [&](const Group& g) {
        const auto x = cols<E>(c.x, g), gamma = cols<E>(c.gamma, g), beta = cols<E>(c.beta, g);
        Sharded<E, Partial> part(K::row_power_sums(x.local()), x.rows(), 2, g);
        const auto sums = all_reduce(std::move(part));
        const auto mv = K::mean_var_from_sums(sums.local(), kH, true);
        auto o = K::norm_apply(x.local(), mv, gamma.local(), &beta.local(), E(static_cast<float>(kEps)));
        return dense(Sharded<E, ColSharded>(std::move(o.y), x.rows(), x.cols(), g));
      });
      // A row whose σ² came out negative would be NaN (√ of a negative): counted apart.
      const M r = pr::error_ratios(ys[0], pr::values(tw.y), pr::bounds(tw.y));
      double finite = 0;
      Index rows_nan = 0;
      for (Index i = 0; i < r.rows(); ++i) {
        if (!ys[0].row(i).array().isFinite().all()) ++rows_nan;
        else finite = std::max(finite, r.row(i).maxCoeff());
      }
      MESSAGE(pr::to_string(pr::format_of<E>) << " 16-bit statistics, TP " << p << ", offset " << offset
                                              << ": largest error ÷ bound on y of the finite rows " << finite << ", "
                                              << rows_nan << " of " << r.rows() << " rows NaN");
      CHECK(r.maxCoeff() > 10.0);
    }
  }
}
