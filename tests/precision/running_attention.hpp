// tests/precision/running_attention.hpp — the running bound through attention (12 heads of 2, with
// biases; heads split over the ranks, the output projection W_o[Row] → Partial → all-reduce) at
// TP 1–4 (threads), fed the dense twin's inputs: z, dx, dW_o within the bound, and the bound not
// vacuous. Defined here, invoked by test_running_attention.cpp (float) and
// test_running_attention_16.cpp (bf16, fp16): the three types in one TU took 1.03 GB of compiler
// memory (attention in float instantiates the ring-attention path as well).
#pragma once

#include <doctest/doctest.h>

#include <Eigen/Core>
#include <map>
#include <string>

#include "running_layers.hpp"
#include "shardalg/nn/layers/attention.hpp"

namespace running_layers {

// float: every tensor in fp32. bf16 and fp16: stored in 16 bits, every product and reduction in
// fp32 (the CPU backend converts, computes in float, rounds each output once), the all-reduce in
// rank order with each add rounded; the twin over Running<f32> under a StorageScope of that format.
TEST_CASE_TEMPLATE_DEFINE("running bound: attention, TP 1-4, within the bound", E, running_attention) {
  Pool pool;
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    const pr::StorageScope scope(storage_of<E>(p));
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
  check_medians<E>(pool);
}

}  // namespace running_layers
