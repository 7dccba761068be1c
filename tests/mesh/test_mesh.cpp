// Mesh of named axes on threads: rank order, axis groups from ThreadComm::split, the ledger's
// axis names, typed axis groups, and the bad-mesh errors with their texts.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

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

TEST_CASE("mesh: axis sizes whose product overflows are MeshError naming them, not a wrapped product") {
  // 4·5·5581·8681·49477·384773 = 2^64 + 4: wrapped, it would equal the world size.
  run_ranks(4, [](ThreadComm& comm) {
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"a", 4}, {"b", 5}, {"c", 5581}, {"d", 8681}, {"e", 49477}, {"f", 384773}}),
                         "Mesh: axis sizes a=4 × b=5 × c=5581 × d=8681 × e=49477 × f=384773 multiply to more than "
                         "9223372036854775807 (overflow), not the world size 4",
                         MeshError);
    // 2^64 exactly (wraps to 0), and 2^32 (no overflow: the product itself is named).
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"a", 65536}, {"b", 65536}, {"c", 65536}, {"d", 65536}}),
                         "Mesh: axis sizes a=65536 × b=65536 × c=65536 × d=65536 multiply to more than "
                         "9223372036854775807 (overflow), not the world size 4",
                         MeshError);
    CHECK_THROWS_WITH_AS(Mesh(comm, {{"a", 65536}, {"b", 65536}}),
                         "Mesh: axis sizes a=65536 × b=65536 = 4294967296 do not match the world size 4", MeshError);
  });
}

namespace {
/// Rank r's axes in the disagreement cases: `odd` on the ranks listed, `axes` on the others.
std::vector<AxisSpec> declared(int r, const std::vector<int>& odd_ranks, const std::vector<AxisSpec>& axes,
                               const std::vector<AxisSpec>& odd) {
  for (int o : odd_ranks)
    if (o == r) return odd;
  return axes;
}
}  // namespace

TEST_CASE("mesh: ranks that declare different axes get the same MeshError on every rank (2 and 4 ranks)") {
  struct Disagreement {
    int world;
    std::vector<int> odd_ranks;
    std::vector<AxisSpec> axes, odd;
    std::string what;
  };
  const std::vector<Disagreement> cases = {
      {2, {1}, {{"dp", 2}, {"tp", 1}}, {{"dp", 1}, {"tp", 2}},
       "Mesh: the ranks declare different meshes: rank 1 declares dp=1 × tp=2 but rank 0 declares dp=2 × tp=1 (1 of 2 "
       "ranks differ from rank 0); every rank must build the Mesh with the same axes"},
      {4, {2, 3}, {{"dp", 2}, {"tp", 2}}, {{"dp", 4}, {"tp", 1}},
       "Mesh: the ranks declare different meshes: rank 2 declares dp=4 × tp=1 but rank 0 declares dp=2 × tp=2 (2 of 4 "
       "ranks differ from rank 0); every rank must build the Mesh with the same axes"},
      {4, {0}, {{"dp", 2}, {"tp", 2}}, {{"tp", 2}, {"dp", 2}},  // rank 0 is the odd one: every other rank differs
       "Mesh: the ranks declare different meshes: rank 1 declares dp=2 × tp=2 but rank 0 declares tp=2 × dp=2 (3 of 4 "
       "ranks differ from rank 0); every rank must build the Mesh with the same axes"},
      {4, {3}, {{"dp", 2}, {"tp", 2}}, {{"dp", 4}},  // fewer axes: without the check, fewer splits (a hang)
       "Mesh: the ranks declare different meshes: rank 3 declares dp=4 but rank 0 declares dp=2 × tp=2 (1 of 4 ranks "
       "differ from rank 0); every rank must build the Mesh with the same axes"},
      {4, {1}, {{"dp", 2}, {"tp", 2}}, {{"dp", 3}, {"tp", 1}},  // rank 1's mesh is bad on its own: it still takes part
       "Mesh: the ranks declare different meshes: rank 1 declares dp=3 × tp=1 but rank 0 declares dp=2 × tp=2 (1 of 4 "
       "ranks differ from rank 0); every rank must build the Mesh with the same axes"},
      {2, {1}, {{"dp", 2}}, {}, 
       "Mesh: the ranks declare different meshes: rank 1 declares no axes but rank 0 declares dp=2 (1 of 2 ranks "
       "differ from rank 0); every rank must build the Mesh with the same axes"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    std::atomic<int> threw{0};
    run_ranks(c.world, [&](ThreadComm& comm) {
      const auto axes = declared(comm.rank(), c.odd_ranks, c.axes, c.odd);
      CHECK_THROWS_WITH_AS(Mesh(comm, axes), c.what.c_str(), MeshError);
      ++threw;
    });
    CHECK(threw.load() == c.world);
  }
}

namespace {
/// ThreadComm that notes every collective called on it (kind, elements, verification or not);
/// its splits are plain ThreadComms.
struct Noting {
  ThreadComm c;
  std::vector<std::string>* log;
  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  std::uintptr_t key() const { return c.key(); }
  void note(const char* kind, std::size_t n, DType t, const CallInfo& i) {
    log->push_back(detail::cat(kind, " ", n, " ", to_string(t), i.verification ? " verification" : ""));
  }
  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    note("all_reduce", n, t, i);
    c.all_reduce(b, n, t, op, i);
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    note("all_gather", n, t, i);
    c.all_gather(s, r, n, t, i);
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    note("reduce_scatter", n, t, i);
    c.reduce_scatter(s, r, n, t, op, i);
  }
  void all_to_all(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    note("all_to_all", n, t, i);
    c.all_to_all(s, r, n, t, i);
  }
  void broadcast(void* b, std::size_t n, DType t, int root, const CallInfo& i = {}) {
    note("broadcast", n, t, i);
    c.broadcast(b, n, t, root, i);
  }
  void send(const void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) { c.send(b, n, t, peer, i); }
  void recv(void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) { c.recv(b, n, t, peer, i); }
  void barrier() { c.barrier(); }
  ThreadComm split(int color, int key) { return c.split(color, key); }
};
}  // namespace

TEST_CASE("mesh: the agreement check is one all-reduce of 2·P integers over the world, unledgered; none on one rank") {
  for (int p : {2, 4}) {
    CAPTURE(p);
    run_ranks(p, [&](ThreadComm& comm) {
      std::vector<std::string> log;
      Ledger ledger;
      Mesh mesh(ledgered(Group(Noting{comm, &log}), ledger), {{"dp", p / 2}, {"tp", 2}});
      CHECK(log == std::vector<std::string>{detail::cat("all_reduce ", 2 * p, " i64 verification")});
      CHECK(ledger.entries().empty());
      CHECK(mesh.size("dp") == p / 2);
    });
  }
  std::vector<std::string> log;
  run_ranks(1, [&](ThreadComm& comm) { Mesh mesh(Group(Noting{comm, &log}), {{"dp", 1}}); });
  CHECK(log.empty());
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
