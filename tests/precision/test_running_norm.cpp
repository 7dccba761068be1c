// The running bound through LayerNorm on X[Row] (sequence parallelism; dγ Partial, then
// all-reduced) at TP 1–4 (threads) in float, bf16 and fp16, fed the dense twin's inputs: y, dx, dγ
// within the bound, and the bound not vacuous. See test_running_mlp.cpp.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <map>
#include <string>

#include "running_layers.hpp"
#include "shardalg/nn/layers/norm.hpp"

using namespace running_layers;

// float: every tensor in fp32. bf16 and fp16: stored in 16 bits, every product and reduction in
// fp32 (the CPU backend converts, computes in float, rounds each output once), the all-reduce in
// rank order with each add rounded; the twin over Running<f32> under a StorageScope of that format.
TEST_CASE_TEMPLATE("running bound: LayerNorm under SP, TP 1-4, within the bound", E, float, Eigen::bfloat16,
                   Eigen::half) {
  Pool pool;
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    const pr::StorageScope scope(storage_of<E>(p));
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
  }
  check_medians<E>(pool);
}
