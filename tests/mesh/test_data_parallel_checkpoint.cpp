// Checkpoint files across meshes (issue 13): written by a ZeRO-1 run at DP=2 × TP=2, loaded at
// DP=1 × TP=4 (Adam), DP=4 × TP=1 (ZeRO-1) and by a plain one-rank Gpt; each resumes on the
// one-rank reference's curve.
#include <doctest/doctest.h>

#include <filesystem>
#include <mutex>

#include <shardalg/nn/train/data_parallel_checkpoint.hpp>

#include "dp_cases.hpp"

using namespace shardalg;

TEST_CASE("data parallel: checkpoint files written at DP=2 x TP=2 (ZeRO-1) resume at other meshes") {
  const auto c = dp_cases::config(false);
  const auto ref = dp_cases::reference(c, 8);
  const auto dir = std::filesystem::temp_directory_path() / "shardalg_dp_checkpoint";
  std::filesystem::remove_all(dir);
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    auto model = nn::DataParallelGpt<double>::init(c, mesh);
    nn::ShardedAdam<double> zero(gt::adam_options());
    for (int s = 0; s < 4; ++s) {
      const auto [x, y] = gt::batch_at(c, gt::kText, s);
      model.forward_backward(x, y);
      model.step(zero, 1.0);
    }
    nn::save_checkpoint(dir, model, zero);
  });
  const std::vector<double> tail(ref.begin() + 4, ref.end());
  struct Shape {
    int d, t;
    bool sharded;
  };
  for (Shape s : {Shape{1, 4, false}, Shape{4, 1, true}}) {
    CAPTURE(s.d);
    std::vector<double> got;
    std::mutex m;
    run_ranks(s.d * s.t, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", s.d}, {"tp", s.t}});
      nn::Adam<double> adam(gt::adam_options());
      nn::ShardedAdam<double> zero(gt::adam_options());
      auto model = s.sharded ? nn::load_checkpoint<double>(dir, mesh, zero) : nn::load_checkpoint<double>(dir, mesh, adam);
      CHECK(model.replica().steps() == 4);
      std::vector<double> l;
      for (int k = 4; k < 8; ++k) {
        const auto [x, y] = gt::batch_at(c, gt::kText, k);
        l.push_back(model.forward_backward(x, y));
        if (s.sharded) model.step(zero, 1.0);
        else model.step(adam, 1.0);
      }
      std::lock_guard lk(m);
      if (comm.rank() == 0) got = l;
    });
    CHECK(gt::curve_diff(got, tail) <= 1e-12);
  }
  // A plain Gpt loads it too (the format is the one of nn/train/checkpoint.hpp).
  nn::Adam<double> adam(gt::adam_options());
  auto plain = nn::load_checkpoint<double>(dir, SelfComm{}, adam);
  CHECK(adam.step_count() == 4);
  std::vector<double> l;
  for (int k = 4; k < 8; ++k) {
    const auto [x, y] = gt::batch_at(c, gt::kText, k);
    l.push_back(plain.forward_backward(x, y));
    plain.step(adam, 1.0);
  }
  CHECK(gt::curve_diff(l, tail) <= 1e-12);
  std::filesystem::remove_all(dir);
}
