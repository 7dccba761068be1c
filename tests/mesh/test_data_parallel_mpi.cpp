// Data parallelism under mpirun -np 4: DP=2 × TP=2 (MPI_Comm_split) trains like one rank on the
// whole batch, with Adam, the sharded optimizer, ZeRO-2 and ZeRO-3; each process computes the
// one-rank reference itself (a SelfComm Gpt).
#include <doctest/doctest.h>

#include <cstring>

#include <shardalg/mpi.hpp>

#include "dp_cases.hpp"

using namespace shardalg;
using dp_cases::Opt;

TEST_CASE("data parallel under MPI: DP=2 x TP=2 and DP=4 x TP=1 train like one rank (25 steps, <= 1e-12)") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 4);
  for (bool sp : {false, true}) {
    const auto c = dp_cases::config(sp);
    const auto ref = dp_cases::reference(c, 25);
    for (int d : {2, 4}) {
      Mesh mesh(world, {{"dp", d}, {"tp", 4 / d}});
      for (Opt which : {Opt::adam, Opt::sharded_adam}) {
        CAPTURE(sp);
        CAPTURE(d);
        CAPTURE(static_cast<int>(which));
        const auto got = dp_cases::train(c, mesh, 25, which);
        CHECK(gt::curve_diff(got, ref) <= 1e-12);
      }
    }
  }
}

TEST_CASE("data parallel under MPI: ZeRO-2 and ZeRO-3 (per-block gathers) at DP=2 x TP=2 and DP=4 x TP=1, +- SP, train like one rank (10 steps, <= 1e-12)") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 4);
  for (bool sp : {false, true}) {
    auto c = dp_cases::config(sp);
    c.layers = 3;  // a block gathered between two others
    const auto ref = dp_cases::reference(c, 10);
    for (int d : {2, 4}) {
      Mesh mesh(world, {{"dp", d}, {"tp", 4 / d}});
      for (bool params : {false, true}) {
        CAPTURE(sp);
        CAPTURE(d);
        CAPTURE(params);
        const auto got = dp_cases::train(c, mesh, 10, Opt::sharded_adam, 4096, 1.0, nullptr, nn::CpAlgo::ring, true, params);
        CHECK(gt::curve_diff(got, ref) <= 1e-12);
        CHECK(got.back() < got.front());
      }
    }
  }
}

TEST_CASE("data parallel under MPI: the sharded optimizer holds 1/dp of Adam's state") {
  MpiComm world(MPI_COMM_WORLD);
  const auto c = dp_cases::config(false);
  Mesh mesh(world, {{"dp", 2}, {"tp", 2}});
  auto model = nn::DataParallelGpt<double>::init(c, mesh, {std::size_t{1} << 30});
  Index psi = 0;
  model.replica().visit_params([&](const nn::ParamInfo&, const nn::TensorMap&, auto& w) { psi += w.local().size(); });
  nn::ShardedAdam<double> zero(gt::adam_options());
  const auto [x, y] = gt::batch_at(c, gt::kText, 0);
  model.forward_backward(x, y);
  model.step(zero, 1.0);
  CHECK(zero.state_bytes() == 2 * sizeof(double) * static_cast<std::size_t>((psi + 1) / 2));
}

namespace {
/// One rank's record of a data-parallel run: losses, gradient norms, and the bytes of its reduced
/// gradient shards (Adam) or of its parameter shards after each step (ZeRO-1).
struct Record {
  std::vector<double> losses, norms;
  std::vector<std::vector<unsigned char>> shards;
};
template <class V>
void add_bytes(Record& r, const V& local) {
  const auto* p = reinterpret_cast<const unsigned char*>(local.data());
  r.shards.emplace_back(p, p + sizeof(double) * static_cast<std::size_t>(local.size()));
}
Record record(const nn::GptConfig& c, const Mesh& mesh, dp_cases::Opt which, int steps) {
  auto model = nn::DataParallelGpt<double>::init(c, mesh, {std::size_t{1} << 12});
  nn::Adam<double> adam(gt::adam_options());
  nn::ShardedAdam<double> zero(gt::adam_options());
  Record r;
  for (int s = 0; s < steps; ++s) {
    const auto batch = gt::batch_at(c, gt::kText, s);
    r.losses.push_back(model.forward_backward(batch.first, batch.second));
    if (which == dp_cases::Opt::adam) {
      model.reduce_gradients();
      model.replica().visit([&](const nn::ParamInfo&, auto&, const auto& g) { add_bytes(r, g.local()); });
      r.norms.push_back(model.step(adam, 1.0));
    } else {
      r.norms.push_back(model.step(zero, 1.0));
      model.replica().visit_params([&](const nn::ParamInfo&, const nn::TensorMap&, auto& w) { add_bytes(r, w.local()); });
    }
  }
  return r;
}
}  // namespace

TEST_CASE("data parallel under MPI, reproducible mode: a 2x2 mesh gives ThreadComm's bits (losses, norms, every shard)") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 4);
  world.set_reproducible(true);  // split() hands the mode to the axis communicators
  for (bool sp : {false, true})
    for (dp_cases::Opt which : {dp_cases::Opt::adam, dp_cases::Opt::sharded_adam}) {
      CAPTURE(sp);
      CAPTURE(static_cast<int>(which));
      const auto c = dp_cases::config(sp);
      // The reference: the same 2×2 mesh on four threads inside this process; this rank's record.
      Record want;
      run_ranks(4, [&](ThreadComm& comm) {
        Record r = record(c, Mesh(Group(comm), {{"dp", 2}, {"tp", 2}}), which, 4);
        if (comm.rank() == world.rank()) want = std::move(r);
      });
      const Record got = record(c, Mesh(Group(world), {{"dp", 2}, {"tp", 2}}), which, 4);
      REQUIRE(got.losses.size() == want.losses.size());
      REQUIRE(got.shards.size() == want.shards.size());
      int differ = 0;
      for (std::size_t i = 0; i < got.losses.size(); ++i) {
        differ += std::memcmp(&got.losses[i], &want.losses[i], sizeof(double)) != 0;
        differ += std::memcmp(&got.norms[i], &want.norms[i], sizeof(double)) != 0;
      }
      for (std::size_t i = 0; i < got.shards.size(); ++i) differ += got.shards[i] != want.shards[i];
      CHECK(differ == 0);
      CHECK(got.shards.size() >= 4);
    }
}

TEST_CASE("context parallelism under MPI: CP=2 x TP=2 (ring) and DP=2 x CP=2 (all-to-all) train like one rank (10 steps, <= 1e-12)") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 4);
  const auto c = dp_cases::config(false);
  const auto ref = dp_cases::reference(c, 10);
  {
    Mesh mesh(world, {{"dp", 1}, {"cp", 2}, {"tp", 2}});
    CHECK(gt::curve_diff(dp_cases::train(c, mesh, 10, Opt::adam, std::size_t{1} << 16, 1.0, nullptr, nn::CpAlgo::ring), ref) <= 1e-12);
  }
  {
    Mesh mesh(world, {{"dp", 2}, {"cp", 2}, {"tp", 1}});
    CHECK(gt::curve_diff(dp_cases::train(c, mesh, 10, Opt::sharded_adam, std::size_t{1} << 16, 1.0, nullptr, nn::CpAlgo::all_to_all), ref) <=
          1e-12);
  }
}
