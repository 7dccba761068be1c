// Data parallelism on a dp × tp mesh (issue 13), shared by test_data_parallel.cpp (threads) and
// test_data_parallel_mpi.cpp (mpirun -np 4). The reference is the plain one-rank Gpt on the whole
// batch (tests/gpt/gpt_cases.hpp: gt::train), a code path that knows nothing of meshes.
#pragma once

#include <string_view>
#include <vector>

#include <shardalg/nn/models/data_parallel.hpp>

#include "../gpt/gpt_cases.hpp"

namespace dp_cases {

using namespace shardalg;

/// The tiny GPT of the loss-curve tests, with a batch of 4 sequences (divisible by dp = 1, 2, 4).
inline nn::GptConfig config(bool sp) { return gt::tiny(sp); }

enum class Opt { adam, sharded_adam };

/// `steps` steps on the mesh (Adam with clipping at `clip`, gt's options); the global loss of
/// every step before its update. `model_out`: the masters after the last step.
inline std::vector<double> train(const nn::GptConfig& c, const Mesh& mesh, int steps, Opt which,
                                 std::size_t bucket_elements = std::size_t{1} << 16, double clip = 1.0,
                                 nn::Masters* model_out = nullptr, nn::CpAlgo cp_algo = nn::CpAlgo::ring,
                                 bool shard_gradients = false, bool shard_parameters = false,
                                 bool unit_buckets = false) {
  nn::DataParallelGpt<double>::Options opts;
  opts.unit_buckets = unit_buckets;  // ZeRO-3's plan: no bucket spans two units
  opts.bucket_elements = bucket_elements;
  opts.shard_gradients = shard_gradients;  // ZeRO-2: reduce-scattered during the backward
  opts.shard_parameters = shard_parameters;  // ZeRO-3: only the parameter slices held between steps
  opts.cp_algo = cp_algo;  // a mesh with a cp axis: attention over cp by the ring or all-to-all
  auto model = nn::DataParallelGpt<double>::init(c, mesh, opts);
  const auto o = gt::adam_options();
  nn::Adam<double> adam(o);
  nn::ShardedAdam<double> zero(o);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = gt::batch_at(c, gt::kText, s);
    losses.push_back(model.forward_backward(x, y));
    if (which == Opt::adam) model.step(adam, clip);
    else model.step(zero, clip);
  }
  if (model_out) *model_out = model.masters();
  return losses;
}

/// The one-rank reference: gt::train with clipping `clip` (its own copy, so clip can be 0).
inline std::vector<double> reference(const nn::GptConfig& c, int steps, double clip = 1.0,
                                     nn::Masters* model_out = nullptr) {
  auto model = nn::Gpt<double>::init(c, SelfComm{});
  nn::Adam<double> opt(gt::adam_options());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = gt::batch_at(c, gt::kText, s);
    losses.push_back(model.forward_backward(x, y));
    model.step(opt, clip);
  }
  if (model_out) *model_out = model.masters();
  return losses;
}

}  // namespace dp_cases
