// tests/gpt/test_gpt_repro_mpi.cpp — bitwise determinism across transports (issue 14): the tiny
// GPT trained at TP = world size under mpirun (-np 2, 3, 4) with MpiComm's reproducible mode
// gives exactly the bits of the same training on ThreadComm: every step's loss, gradient norm
// and every gradient (each rank's shard), float and double, with and without sequence
// parallelism. Each process runs the P-thread world itself as the reference and compares its
// own rank's shard. The default mode (MPI's own algorithms) is run too and its differences are
// reported, not asserted. The 2×2 mesh case (DP × TP): tests/mesh/test_data_parallel_mpi.cpp.
#include <mpi.h>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpt_cases.hpp"
#include "shardalg/comm/mpi.hpp"

using namespace gt;

namespace {

/// A model whose heads (12), ffn (192), tokens (48) and vocabulary split at TP 2, 3 and 4.
nn::GptConfig tiny3(bool sp) {
  auto c = tiny(sp);
  c.hidden = 48;
  c.heads = 12;
  c.seq = 12;
  return c;
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<std::string> names;                 // step.parameter
  std::vector<std::vector<unsigned char>> grads;  // this rank's gradient shard, as bytes
};

template <class T>
Run train_recording(const nn::GptConfig& c, const Group& g, int steps) {
  auto model = nn::Gpt<T>::init(c, g);
  const auto o = adam_options();
  nn::Adam<T> opt({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  Run run;
  for (int s = 0; s < steps; ++s) {
    const auto batch = batch_at(c, kText, s);
    run.losses.push_back(static_cast<double>(model.forward_backward(batch.first, batch.second)));
    model.visit([&](const nn::ParamInfo& info, auto&, const auto& grad) {
      const auto& l = grad.local();
      const auto* p = reinterpret_cast<const unsigned char*>(l.data());
      run.names.push_back(std::to_string(s) + "." + info.name);
      run.grads.emplace_back(p, p + sizeof(T) * static_cast<std::size_t>(l.size()));
    });
    run.norms.push_back(model.step(opt, 1.0));
  }
  return run;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// Differences between two runs: losses, norms, gradient tensors that are not the same bits.
struct Diff {
  int losses = 0, norms = 0, grads = 0, tensors = 0;
  std::string first;
};
Diff compare(const Run& a, const Run& b) {
  Diff d;
  for (std::size_t i = 0; i < a.losses.size(); ++i) d.losses += !same_bits(a.losses[i], b.losses[i]);
  for (std::size_t i = 0; i < a.norms.size(); ++i) d.norms += !same_bits(a.norms[i], b.norms[i]);
  d.tensors = static_cast<int>(a.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    if (a.names[i] != b.names[i] || a.grads[i] != b.grads[i]) {
      if (d.grads++ == 0) d.first = a.names[i];
    }
  return d;
}

}  // namespace

TEST_CASE_TEMPLATE("MPI reproducible mode: the GPT's losses and every gradient are ThreadComm's bits", T, float,
                   double) {
  constexpr int kSteps = 4;
  int P = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MpiComm repro(MPI_COMM_WORLD), plain(MPI_COMM_WORLD);
  repro.set_reproducible(true);
  plain.set_reproducible(false);
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    const auto cfg = tiny3(sp);
    Run ref;
    run_ranks(P, [&](ThreadComm& c) {
      auto r = train_recording<T>(cfg, Group(c), kSteps);
      if (c.rank() == me) ref = std::move(r);
    });
    const Run got = train_recording<T>(cfg, Group(repro), kSteps);
    REQUIRE(got.names == ref.names);
    const Diff d = compare(got, ref);
    CHECK_MESSAGE(d.losses == 0, d.losses << " of " << kSteps << " losses differ");
    CHECK_MESSAGE(d.norms == 0, d.norms << " of " << kSteps << " gradient norms differ");
    CHECK_MESSAGE(d.grads == 0, d.grads << " of " << d.tensors << " gradient tensors differ, first " << d.first);

    const Run def = train_recording<T>(cfg, Group(plain), kSteps);
    const Diff dd = compare(def, ref);
    int mine[3] = {dd.losses, dd.norms, dd.grads}, all[3] = {0, 0, 0};  // summed over ranks
    MPI_Allreduce(mine, all, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const std::string msg = std::string("TP=") + std::to_string(P) + (sp ? " SP " : " ") + (sizeof(T) == 4 ? "float" : "double") +
              ", default mode vs ThreadComm, summed over ranks: losses " + std::to_string(all[0]) + "/" +
              std::to_string(P * kSteps) + ", gradient norms " + std::to_string(all[1]) + "/" +
              std::to_string(P * kSteps) + ", gradient shards " + std::to_string(all[2]) + "/" +
              std::to_string(P * d.tensors);
    if (me == 0) MESSAGE(msg);
  }
}
