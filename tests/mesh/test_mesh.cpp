// Mesh of named axes on threads: rank order, axis groups from ThreadComm::split, the ledger's
// axis names, typed axis groups, and the bad-mesh errors with their texts.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>

#include <shardalg/shardalg.hpp>

#include "mesh_cases.hpp"
#include "testing.hpp"

using namespace shardalg;

TEST_CASE("mesh: axis groups combine exactly their ranks (2x2, 2x3, 3x2, 2x2x2, 1x4, 8)") {
  const std::vector<std::vector<AxisSpec>> meshes = {
      {{"dp", 2}, {"tp", 2}},
      {{"dp", 2}, {"tp", 3}},
      {{"dp", 3}, {"tp", 2}},
      {{"dp", 2}, {"pp", 2}, {"tp", 2}},
      {{"dp", 1}, {"tp", 4}},
      {{"expert", 8}},
  };
  for (const auto& axes : meshes) {
    int world = 1;
    for (const auto& a : axes) world *= a.size;
    CAPTURE(world);
    run_ranks(world, [&](ThreadComm& comm) { mesh_cases::check_axes(comm, axes); });
  }
}

TEST_CASE("mesh: SelfComm is the 1x1 mesh") {
  mesh_cases::check_axes(SelfComm{}, {{"dp", 1}, {"tp", 1}});
}

TEST_CASE("mesh: ThreadComm::split by arbitrary colors and keys") {
  // Colors: rank % 3; keys reverse the order. Sub-rank = position by (key, rank) within the color.
  run_ranks(7, [](ThreadComm& comm) {
    const int r = comm.rank();
    ThreadComm sub = comm.split(r % 3, -r);
    int size = 0, before = 0;
    for (int s = 0; s < 7; ++s)
      if (s % 3 == r % 3) {
        ++size;
        before += (-s < -r);
      }
    CHECK(sub.size() == size);
    CHECK(sub.rank() == before);
    double x = r;
    sub.all_reduce(&x, 1, DType::f64, ReduceOp::sum);
    double expect = 0;
    for (int s = r % 3; s < 7; s += 3) expect += s;
    CHECK(x == expect);
    // Splitting twice more (nested) keeps working and the slots are reused safely.
    ThreadComm one = sub.split(sub.rank(), 0);
    CHECK(one.size() == 1);
    ThreadComm again = comm.split(0, r);
    CHECK(again.size() == 7);
    CHECK(again.rank() == r);
  });
}

TEST_CASE("mesh: a rank that fails while its axis peers wait in an axis collective ends the run") {
  std::atomic<int> aborted{0};
  CHECK_THROWS_WITH_AS(run_ranks(4,
                                 [&](ThreadComm& comm) {
                                   Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
                                   if (comm.rank() == 3) throw std::runtime_error("rank 3 failed");
                                   double x = 1;
                                   try {
                                     Group t = mesh.group("tp");
                                     t.all_reduce(&x, 1);  // rank 2 waits for rank 3 here
                                     Group d = mesh.group("dp");
                                     d.all_reduce(&x, 1);  // rank 1 waits for rank 3 here
                                   } catch (const CommAbortedError&) {
                                     ++aborted;
                                     throw;
                                   }
                                 }),
                       "rank 3 failed", std::runtime_error);
  CHECK(aborted.load() >= 1);
}

TEST_CASE("mesh: bad meshes are MeshError naming the values") {
  run_ranks(4, [](ThreadComm& comm) {
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"dp", 2}, {"tp", 3}}),
                         "Mesh: axis sizes dp=2 × tp=3 = 6 do not match the world size 4", MeshError);
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"dp", 4}, {"tp", 0}}),
                         "Mesh: axis \"tp\" has size 0; every axis needs at least 1 rank", MeshError);
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"tp", 2}, {"tp", 2}}), "Mesh: axis \"tp\" is named twice", MeshError);
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"dp", 2}, {"", 2}}), "Mesh: axis 1 has an empty name", MeshError);
    CHECK_THROWS_WITH_AS(Mesh(comm, {}), "Mesh: no axes; give at least one {name, size}", MeshError);
    Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    CHECK_THROWS_WITH_AS((void)mesh.group("ep"), "Mesh: no axis \"ep\" in the mesh dp=2 × tp=2", MeshError);
    CHECK_THROWS_WITH_AS((void)mesh.axis<pp>(), "Mesh: no axis \"pp\" in the mesh dp=2 × tp=2", MeshError);
    CHECK(mesh.describe() == "dp=2 × tp=2");
  });
  CHECK_THROWS_WITH_AS(Mesh(Group{}, {{"dp", 1}}),
                       "Mesh: the world is an empty Group (default-constructed, no communicator)", EmptyTensorError);
}

namespace {
struct NoSplit {  // a communicator without split()
  int rank() const { return 0; }
  int size() const { return 1; }
  std::uintptr_t key() const { return 7; }
  static constexpr std::string_view name() { return "NoSplit"; }
  void all_reduce(void*, std::size_t, DType, ReduceOp) {}
  void all_gather(const void*, void*, std::size_t, DType) {}
  void reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp) {}
  void all_to_all(const void*, void*, std::size_t, DType) {}
  void broadcast(void*, std::size_t, DType, int) {}
  void send(const void*, std::size_t, DType, int) {}
  void recv(void*, std::size_t, DType, int) {}
  void barrier() {}
};
int takes_tp(const AxisGroup<tp>& g) { return g.size(); }
}  // namespace

TEST_CASE("mesh: a communicator that cannot split says so; a color must not be negative") {
  CHECK_THROWS_WITH_AS(Mesh(Group(NoSplit{}), {{"dp", 1}}), "Group::split: NoSplit cannot split into sub-groups",
                       CommError);
  run_ranks(2, [](ThreadComm& comm) {
    CHECK_THROWS_WITH_AS((void)comm.split(-1, 0), "ThreadComm::split: color -1 is negative", CommError);
  });
}

TEST_CASE("mesh: typed axis groups") {
  run_ranks(4, [](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    AxisGroup<tp> t = mesh.axis<tp>();
    CHECK(takes_tp(t) == 2);
    CHECK(t.rank() == comm.rank() % 2);
    AxisGroup<dp> d = mesh.axis<dp>();
    CHECK(d.rank() == comm.rank() / 2);
    CHECK(AxisGroup<tp>::name() == "tp");
    // tests/compile_fail/E160_wrong_axis_group.cpp: takes_tp(d) does not compile.
  });
}
