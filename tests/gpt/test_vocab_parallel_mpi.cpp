// tests/gpt/test_vocab_parallel_mpi.cpp — the vocabulary-parallel embedding, tied head and fused
// cross-entropy on MPI_COMM_WORLD (mpirun -np 2 and -np 4): the tied chain against the dense
// twin, float and double, Megatron's oracle at 4 ranks, and the exact ledger.
#include <mpi.h>

#include <doctest/doctest.h>

#include "shardalg/comm/mpi.hpp"
#include "vocab_cases.hpp"

namespace {
Group world() { return Group(MpiComm(MPI_COMM_WORLD)); }
}  // namespace

TEST_CASE_TEMPLATE("MPI: embedding, tied head and fused loss equal the dense tied model", T, float, double) {
  const Group g = world();
  const M master = rounded<T>(testing::random_real<double>(kVocab, kH, 41).cast<double>());
  const M dy = rounded<T>(testing::random_real<double>(kT, kH, 42).cast<double>());
  const Ids ids = make_ids(43), tg = make_targets(44, true);
  for (double eps : {0.0, 0.1}) {
    CAPTURE(eps);
    check_tied<T>(tied_case<T>(g, master, ids, tg, eps, dy), g.size(), master, ids, tg, eps, dy);
  }
}

TEST_CASE("MPI: Megatron's oracle (when run on 4 ranks)") {
  const Group g = world();
  if (g.size() != 4) return;
  Ids targets(16);
  for (int i = 0; i < 16; ++i) targets[i] = 2 * i;
  Mat<double> local(16, 32);
  for (Index i = 0; i < 16; ++i)
    for (Index j = 0; j < 32; ++j) local(i, j) = static_cast<double>(j % 8);
  const nn::VocabParallelCrossEntropy<double> ce(128);
  const auto f = ce.forward(Sharded<double, ColSharded>(local, 16, 128, g), targets);
  const M losses = to_dense(f.losses);
  double s8 = 0;
  for (int k = 0; k < 8; ++k) s8 += std::exp(double(k));
  for (int i = 0; i < 16; ++i) {
    const double closed = std::log(16.0 * s8) - double(targets[i] % 8);
    CHECK(std::abs(losses(i, 0) - closed) <= 1e-12 * closed);
  }
}

TEST_CASE("MPI: ledger of the embedding, head and loss") {
  for (double eps : {0.0, 0.1}) {
    CAPTURE(eps);
    check_ledger(ledger_run(world(), eps), eps);
  }
}
