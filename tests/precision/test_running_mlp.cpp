// The running bound through the tensor-parallel MLP (X[R] · W1[C] → act → · W2[Row] → Partial →
// all-reduce) at TP 1–4 (threads), GELU and SwiGLU, in float, bf16 and fp16 (16-bit storage, fp32
// arithmetic; the twin under a StorageScope), fed the dense twin's inputs: z, dx, dW1, dW2, db2
// within the bound, and the bound not vacuous (pooled medians in docs/verify.md, "Through a layer:
// the running bound"). One layer per TU (test_running_norm.cpp, running_attention.hpp): the
// three layers' programs in three element types in one TU took 1.37 GB of compiler memory.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <map>
#include <string>

#include "running_layers.hpp"

using namespace running_layers;

// float: every tensor in fp32. bf16 and fp16: stored in 16 bits, every product and reduction in
// fp32 (the CPU backend converts, computes in float, rounds each output once), the all-reduce in
// rank order with each add rounded; the twin over Running<f32> under a StorageScope of that format.
TEST_CASE_TEMPLATE("running bound: the MLP (GELU, SwiGLU), TP 1-4, within the bound", E, float, Eigen::bfloat16,
                   Eigen::half) {
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
  }
  check_medians<E>(pool);
}
