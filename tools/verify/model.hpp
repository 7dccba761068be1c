// tools/verify/model.hpp — the dense model every rank builds from the seed (the masters), the
// dense reference pass (reference/dense_layers.hpp, plain Eigen), and the masters under nn::Gpt's names.
#pragma once

#include <cstdint>
#include <vector>

#include "options.hpp"
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/reference/dense_layers.hpp"

namespace sv {

using ::ref::M;
using Ids = std::vector<std::int64_t>;

struct DenseModel {
  ::ref::Gpt g;  // reference/dense_layers.hpp's GPT: E, blocks, final norm, embedding dropout
  Ids ids, targets;
};

/// The masters, tokens and targets of `o`, drawn from o.seed (rounded to the element type of --dtype).
DenseModel make_model(const Options& o);

/// The dense pass: reference/dense_layers.hpp's gpt_forward and gpt_backward (plain Eigen, double).
struct DenseRun {
  ::ref::GptOut out;
  ::ref::GptGrads grads;
  M dyf;  // the gradient leaving the head into the final norm: dlogits · E
};
DenseRun dense_run(const DenseModel& m);

/// The dense model as nn::Gpt's logical masters (names as Gpt::visit_params enumerates them).
nn::Masters to_masters(const Options& o, const ::ref::Gpt& g);
/// The dense gradients under the same names.
nn::Masters grad_masters(const Options& o, const ::ref::GptGrads& g);
/// Logical tensors that one physical parameter holds, side by side under the parameter's name:
/// attn.{wq,wk,wv} → attn.qkv.weight, attn.{bq,bk,bv} → attn.qkv.bias, mlp.{w1,w_up} → mlp.fc1.weight,
/// mlp.{b1,b_up} → mlp.fc1.bias; the rest keep their names.
nn::Masters fuse_parts(const nn::Masters& in);

}  // namespace sv
