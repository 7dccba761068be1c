// shardalg/nn/train/data_parallel_checkpoint.hpp — checkpoints of a DataParallelGpt, in the format of
// nn/train/checkpoint.hpp (logical tensors: any mesh loads what any mesh wrote, a plain Gpt included).
//
//   save_checkpoint(dir, model, opt)          every rank calls; world rank 0 writes, atomically
//   load_checkpoint(dir, mesh, opt, options)  → DataParallelGpt on this mesh
//
// The sharded optimizer's moments are gathered over dp into logical "m." / "v." tensors on save
// and sliced again on load, so a ZeRO-1 run at DP=2 × TP=2 resumes as Adam at DP=1 × TP=4, and
// the reverse. The saved configuration's batch is the global batch.
#pragma once

#include "shardalg/nn/train/checkpoint.hpp"
#include "shardalg/nn/models/data_parallel.hpp"

namespace shardalg::nn {

namespace detail {
template <class Opt>
inline constexpr bool adam_like = requires(const Opt& o) { o.options().beta1; };
}

template <Element T, class B, class Opt>
void save_checkpoint(const std::filesystem::path& dir, DataParallelGpt<T, B>& model, Opt& opt) {
  Masters all = model.masters();
  for (auto& [k, v] : model.optimizer_masters(opt)) all.emplace("optim." + k, std::move(v));
  Group world = model.mesh().world();
  if (world.rank() == 0) {
    nlohmann::json meta{{"config", to_json(model.config())},
                        {"step", model.replica().steps()},
                        {"optimizer", detail::optimizer_json(opt)},
                        {"mesh", {{"dp", model.mesh().size("dp")}, {"tp", model.mesh().size("tp")}}}};
    write_checkpoint_files(dir, meta, all);
  }
  world.barrier();
}

/// Load a checkpoint written at any mesh (or by a plain Gpt) onto `mesh` (axes dp and tp).
template <Element T, class B = CpuBackend, class Opt>
DataParallelGpt<T, B> load_checkpoint(const std::filesystem::path& dir, const Mesh& mesh, Opt& opt,
                                      const LoadOptions& options = {}, typename DataParallelGpt<T, B>::Options dpo = {}) {
  auto in = detail::read_for_load(dir, mesh.world(), options, detail::adam_like<Opt> ? "adam" : "sgd");
  auto model = DataParallelGpt<T, B>::init(in.cfg, mesh, dpo);
  model.load(in.weights);
  model.replica().set_steps(in.model_step);
  if (!in.restore_optimizer) return model;
  if constexpr (requires { opt.set_step_count(0L); }) opt.set_step_count(in.optimizer_step);
  model.load_optimizer(opt, in.state);
  return model;
}

}  // namespace shardalg::nn
