// Pipeline execution (issue 16) under mpirun -np 8: nn::PipelineGpt run by pipeline::Executor on
// MpiComm meshes dp × pp × tp = 2 × 2 × 2 and 1 × 4 × 2 (MPI_Isend / MPI_Irecv between the stages,
// MPI_Comm_split for the axes and the embedding group) for AFAB, 1F1B, interleaved 1F1B and ZB-H1,
// with and without output deallocation, variable sequence lengths and overlapped receives, against
// the dense model (reference/dense_layers.hpp); and pp × cp × tp = 2 × 2 × 2 with attention over cp
// (ring, all-to-all); and training steps with Adam, ZeRO-1 and ZeRO-3 against one rank's curve.
// Each rank checks the gradients of the layers its stages
// hold (and how many tensors that is); together they cover the model.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <shardalg/mpi.hpp>

#include "pipeline_cases.hpp"

using namespace shardalg;
namespace pc = pcases;

namespace {
/// The tensors a rank's stages hold, counted from the layout alone: 16 per decoder layer (two
/// norms' γ and β, Wq bq Wk bk Wv bv Wo bo, W1 b1 W2 b2), the embedding on the first stage, the
/// final norm's γ and β on the last.
std::size_t expected_tensors(const pc::Setup& s, int pp_rank) {
  const auto lay = pipeline::parse_layout(pc::layout(s), s.pp, pc::kLayers);
  std::size_t n = 0;
  for (int v = 0; v < lay.vpp; ++v) {
    n += 16 * static_cast<std::size_t>(lay.num_layers_to_build(pipeline::LayerType::decoder, pp_rank, v));
    n += static_cast<std::size_t>(lay.num_layers_to_build(pipeline::LayerType::embedding, pp_rank, v));
    n += 2 * static_cast<std::size_t>(lay.num_layers_to_build(pipeline::LayerType::loss, pp_rank, v));
  }
  return n;
}
}  // namespace

TEST_CASE("MPI: DP × PP × TP on 8 processes equals the dense model, every schedule") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 8);
  const std::vector<std::string> schedules = {"AFAB", "1F1B", "interleaved", "ZB-H1"};
  for (int pp : {2, 4}) {
    for (std::size_t k = 0; k < schedules.size(); ++k) {
      for (bool flip : {false, true}) {
        pc::Setup s;
        s.pp = pp, s.tp = 2, s.dp = 8 / (2 * pp), s.schedule = schedules[k], s.m = 4;
        s.dealloc = flip, s.varlen = flip != (k % 2 == 0), s.overlap = flip, s.sp = !flip;
        CAPTURE(s.name());
        const auto c = pc::config(s);
        const auto m = pc::masters(c, 70 + static_cast<std::uint64_t>(pp));
        const auto b = pc::batch(s, c, 170 + k);
        const auto want = pc::dense(s, c, m, b, c.seed ^ 0x9E3779B97F4A7C15ULL);
        Mesh mesh(Group(world), {{"dp", s.dp}, {"pp", s.pp}, {"tp", s.tp}});
        const auto out = pc::run_rank(s, c, m, b, mesh);
        CHECK(std::abs(out.loss - want.loss) <= 1e-12 * std::abs(want.loss));
        nn::Masters mine;  // the dense gradients of this rank's tensors
        for (const auto& [name, x] : out.grads) mine[name] = want.grads.at(name);
        const auto worst = pc::worst_error(out.grads, mine);
        const double err = worst.first;
        const std::string at = worst.second;
        CAPTURE(at);
        CHECK(err <= 1e-12);
        CHECK(out.grads.size() == expected_tensors(s, mesh.coord("pp")));
      }
    }
  }
}

TEST_CASE("MPI: PP × CP × TP = 2 × 2 × 2 equals the dense model, ring and all-to-all") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 8);
  for (bool a2a : {false, true}) {
    pc::Setup s;
    s.pp = 2, s.cp = 2, s.tp = 2, s.schedule = a2a ? "ZB-H1" : "1F1B", s.m = 4, s.a2a = a2a, s.sp = a2a, s.overlap = true;
    CAPTURE(s.name());
    const auto c = pc::config(s);
    const auto m = pc::masters(c, 77);
    const auto b = pc::batch(s, c, 177);
    const auto want = pc::dense(s, c, m, b, c.seed ^ 0x9E3779B97F4A7C15ULL);
    Mesh mesh(Group(world), {{"pp", s.pp}, {"cp", s.cp}, {"tp", s.tp}});
    const auto out = pc::run_rank(s, c, m, b, mesh);
    CHECK(std::abs(out.loss - want.loss) <= 1e-12 * std::abs(want.loss));
    nn::Masters mine;
    for (const auto& [name, x] : out.grads) mine[name] = want.grads.at(name);
    const auto worst = pc::worst_error(out.grads, mine);
    const double err = worst.first;
    const std::string at = worst.second;
    CAPTURE(at);
    CHECK(err <= 1e-12);
    CHECK(out.grads.size() == expected_tensors(s, mesh.coord("pp")));
  }
}

TEST_CASE("MPI: communicate() batched and ring exchange, prev and next at once, with and without shapes") {
  MpiComm world(MPI_COMM_WORLD);
  Ledger ledger;
  Group pp = ledgered(world, ledger), tp = SelfComm{};
  const int p = pp.size(), r = pp.rank();
  for (bool ring : {false, true})
    for (bool variable : {false, true}) {
      CAPTURE(ring);
      CAPTURE(variable);
      ledger.clear();
      const pipeline::ActShape shape{3, 2, 5};
      auto mk = [](int who, int dir) { return pc::M::Constant(6, 5, 10.0 * who + dir); };
      auto a = shard<Replicated>(mk(r, 1), tp), b = shard<Replicated>(mk(r, 2), tp);
      auto got = pipeline::communicate(pp, tp, &a, &b, true, true, shape, pipeline::P2POptions{variable, ring}, true);
      CHECK(compare(*got.from_prev, mk((r + p - 1) % p, 2)).max_abs == 0.0);
      CHECK(compare(*got.from_next, mk((r + 1) % p, 1)).max_abs == 0.0);
      CHECK(ledger.count(CollectiveKind::send) == (variable ? 4u : 2u));  // a shape before each block
      CHECK(ledger.count(CollectiveKind::recv) == (variable ? 4u : 2u));
    }
}

TEST_CASE("MPI: pipeline training on dp 2 × pp 2 × tp 2 with Adam, ZeRO-1 and ZeRO-3 follows one rank's curve (4 steps, <= 1e-12)") {
  MpiComm world(MPI_COMM_WORLD);
  REQUIRE(world.size() == 8);
  pc::Setup s;
  s.dp = 2, s.pp = 2, s.tp = 2, s.schedule = "1F1B", s.m = 4;
  const auto c = pc::config(s);
  const auto m = pc::masters(c, 23);
  const auto ref = pc::train_reference(s, c, m, 4);
  Mesh mesh(world, {{"dp", 2}, {"pp", 2}, {"tp", 2}});
  for (int zero : {0, 1, 3}) {
    CAPTURE(zero);
    const auto got = pc::train_rank<false>(s, c, m, mesh, 4, zero);
    CHECK(gt::curve_diff(got, ref) <= 1e-12);
  }
}
