// tests/mpi/test_mpi_reproducible.cpp — MpiComm's reproducible mode against ThreadComm, bit for
// bit (issue 14), under mpirun -np 2, 3 and 4. Every process runs the same P-rank world on
// threads as its reference (an independent path: shared memory, no MPI) and compares its own
// rank's result with the MPI one: all_reduce and reduce_scatter on counts that P does not divide,
// every dtype and ReduceOp, and counts long enough to take several exchange segments.
//
// The default mode (MPI's own algorithms) is measured beside it and reported (MESSAGE), not
// asserted: which order Open MPI picks is its business.
#include <mpi.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "shardalg/comm/mpi.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;

namespace {

int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Rank r's input: values of many magnitudes and both signs (so that the order of a float sum
/// shows in its bits); integers for the integer types.
template <class T>
std::vector<T> input(std::size_t n, int r, std::uint64_t salt) {
  std::mt19937_64 gen(salt * 1000003u + static_cast<std::uint64_t>(r));
  std::vector<T> v(n);
  if constexpr (std::is_floating_point_v<T> || HostHalf<T>) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::uniform_int_distribution<int> e(HostHalf<T> ? -8 : -20, HostHalf<T> ? 8 : 20);  // fp16 ends at 65504
    for (auto& x : v) x = static_cast<T>(std::ldexp(u(gen), e(gen)));
  } else {
    std::uniform_int_distribution<int> u(-1000, 1000);
    for (auto& x : v) x = static_cast<T>(u(gen));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
template <class T>
std::size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}

/// ThreadComm's all_reduce at P ranks on the inputs input(n, t, salt), as seen by rank `me`.
template <class T>
std::vector<T> thread_all_reduce(int P, int me, std::size_t n, std::uint64_t salt, ReduceOp op) {
  std::vector<T> out;
  run_ranks(P, [&](ThreadComm& c) {
    auto buf = input<T>(n, c.rank(), salt);
    c.all_reduce(buf.data(), n, dtype_of<T>, op);
    if (c.rank() == me) out = buf;
  });
  return out;
}
template <class T>
std::vector<T> thread_reduce_scatter(int P, int me, std::size_t n, std::uint64_t salt, ReduceOp op) {
  std::vector<T> out;
  run_ranks(P, [&](ThreadComm& c) {
    const auto send = input<T>(n * static_cast<std::size_t>(P), c.rank(), salt);
    std::vector<T> recv(n);
    c.reduce_scatter(send.data(), recv.data(), n, dtype_of<T>, op);
    if (c.rank() == me) out = recv;
  });
  return out;
}

// 1, 2, 3, 5, 7, 13 and 1001 are not multiples of 2, 3 or 4. The exchange runs in rounds of
// 4 MiB landing per rank (262144 floats or 131072 doubles per peer at P = 4): reduce_scatter's
// blocks of 300007 take 2–3 rounds at P = 4, and kLong (all_reduce only) 2–3 rounds at every P.
const std::size_t kCounts[] = {0, 1, 2, 3, 5, 7, 13, 1001, 300007};
constexpr std::size_t kLong = 1200007;

template <class T>
void check_all(ReduceOp op) {
  const int P = world_size(), me = world_rank();
  MpiComm repro(MPI_COMM_WORLD), plain(MPI_COMM_WORLD);
  repro.set_reproducible(true);
  plain.set_reproducible(false);
  std::uint64_t salt = 1;
  for (std::size_t n : kCounts) {
    CAPTURE(n);
    ++salt;
    const auto ref = thread_all_reduce<T>(P, me, n, salt, op);
    auto a = input<T>(n, me, salt), b = a;
    repro.all_reduce(a.data(), n, dtype_of<T>, op);
    CHECK(same_bits(a, ref));
    plain.all_reduce(b.data(), n, dtype_of<T>, op);
    if (op == ReduceOp::sum && n == 1001 && me == 0)
      MESSAGE("P=" << P << " " << to_string(dtype_of<T>) << " all_reduce sum n=1001: default mode differs from "
                   "ThreadComm in " << differing(b, ref) << " elements, reproducible in " << differing(a, ref));

    // in place through iall_reduce (blocking in reproducible mode)
    auto c = input<T>(n, me, salt);
    repro.iall_reduce(c.data(), n, dtype_of<T>, op).wait();
    CHECK(same_bits(c, ref));

    const auto rref = thread_reduce_scatter<T>(P, me, n, salt, op);
    const auto send = input<T>(n * static_cast<std::size_t>(P), me, salt);
    std::vector<T> r1(n), r2(n);
    repro.reduce_scatter(send.data(), r1.data(), n, dtype_of<T>, op);
    CHECK(same_bits(r1, rref));
    plain.reduce_scatter(send.data(), r2.data(), n, dtype_of<T>, op);
    if (op == ReduceOp::sum && n == 1001 && me == 0)
      MESSAGE("P=" << P << " " << to_string(dtype_of<T>) << " reduce_scatter sum n=1001: default (ring) differs from "
                   "ThreadComm in " << differing(r2, rref) << " elements, reproducible in " << differing(r1, rref));
    // in place: recv is this rank's block of send
    auto inplace = send;
    T* mine = inplace.data() + static_cast<std::size_t>(me) * n;
    repro.reduce_scatter(inplace.data(), mine, n, dtype_of<T>, op);
    CHECK(std::memcmp(mine, rref.data(), n * sizeof(T)) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("MPI reproducible mode: all_reduce and reduce_scatter are ThreadComm's bits", T, float, double,
                   std::int32_t, std::int64_t) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    CAPTURE(static_cast<int>(op));
    check_all<T>(op);
  }
}

TEST_CASE_TEMPLATE("MPI reproducible mode: a long all_reduce (several exchange rounds) is ThreadComm's bits", T,
                   float, double) {
  const int P = world_size(), me = world_rank();
  MpiComm repro(MPI_COMM_WORLD);
  repro.set_reproducible(true);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    const auto ref = thread_all_reduce<T>(P, me, kLong, 99, op);
    auto a = input<T>(kLong, me, 99);
    repro.all_reduce(a.data(), kLong, dtype_of<T>, op);
    CHECK(same_bits(a, ref));
  }
}

// bf16 and fp16: MPI has no sum of them, so MpiComm adds them in rank order in every mode (each add
// in fp32, rounded once) and moves them as their bits: the default mode gives ThreadComm's bits too.
TEST_CASE_TEMPLATE("MPI: bf16 and fp16 all_reduce and reduce_scatter are ThreadComm's bits in the default mode", T,
                   Eigen::bfloat16, Eigen::half) {
  const int P = world_size(), me = world_rank();
  MpiComm plain(MPI_COMM_WORLD);
  plain.set_reproducible(false);
  std::uint64_t salt = 500;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min})
    for (std::size_t n : kCounts) {
      CAPTURE(static_cast<int>(op));
      CAPTURE(n);
      ++salt;
      const auto ref = thread_all_reduce<T>(P, me, n, salt, op);
      auto a = input<T>(n, me, salt), c = a;
      plain.all_reduce(a.data(), n, dtype_of<T>, op);
      CHECK(same_bits(a, ref));
      plain.iall_reduce(c.data(), n, dtype_of<T>, op).wait();
      CHECK(same_bits(c, ref));
      const auto rref = thread_reduce_scatter<T>(P, me, n, salt, op);
      const auto send = input<T>(n * static_cast<std::size_t>(P), me, salt);
      std::vector<T> r(n);
      plain.reduce_scatter(send.data(), r.data(), n, dtype_of<T>, op);
      CHECK(same_bits(r, rref));
    }
}

TEST_CASE_TEMPLATE("MPI: bf16 and fp16 travel as their bits (all_gather, broadcast, send/recv)", T, Eigen::bfloat16,
                   Eigen::half) {
  const int P = world_size(), me = world_rank();
  MpiComm c(MPI_COMM_WORLD);
  const std::size_t n = 1001;
  const auto mine = input<T>(n, me, 77);
  std::vector<T> all(n * static_cast<std::size_t>(P));
  c.all_gather(mine.data(), all.data(), n, dtype_of<T>);
  for (int r = 0; r < P; ++r) {
    const auto want = input<T>(n, r, 77);
    CHECK(std::memcmp(all.data() + static_cast<std::size_t>(r) * n, want.data(), n * sizeof(T)) == 0);
  }
  auto b = me == 0 ? input<T>(n, 0, 78) : std::vector<T>(n);
  c.broadcast(b.data(), n, dtype_of<T>, 0);
  CHECK(same_bits(b, input<T>(n, 0, 78)));
  if (P >= 2 && me < 2) {  // rank 0 → rank 1
    auto m = input<T>(n, 0, 79);
    if (me == 0) c.send(m.data(), n, dtype_of<T>, 1);
    else {
      std::vector<T> got(n);
      c.recv(got.data(), n, dtype_of<T>, 0);
      CHECK(same_bits(got, m));
    }
  }
}

TEST_CASE("MPI reproducible mode: the flag, its inheritance and the asynchronous fallback") {
  MpiComm c(MPI_COMM_WORLD);
  c.set_reproducible(true);
  CHECK(c.reproducible());
  CHECK_FALSE(c.async_all_reduce());
  const Group g = c;
  CHECK_FALSE(g.async_all_reduce());
  const MpiComm sub = c.split(0, world_rank());
  CHECK(sub.reproducible());
  c.set_reproducible(false);
  CHECK(c.async_all_reduce());
}

TEST_CASE("MPI reproducible mode: all_reduce through the algebra on odd shapes") {
  const int P = world_size(), me = world_rank();
  MpiComm m(MPI_COMM_WORLD);
  m.set_reproducible(true);
  const Group g = m;
  using M = CpuBackend::matrix<double>;
  const Index rows = 7, cols = 5;  // 35 elements: not a multiple of 2, 3 or 4
  auto local_of = [&](int r) {
    const auto v = input<double>(static_cast<std::size_t>(rows * cols), r, 77);
    return M(Eigen::Map<const M>(v.data(), rows, cols));
  };
  const auto got = all_reduce(Sharded<double, Partial>(local_of(me), rows, cols, g));
  M ref;
  run_ranks(P, [&](ThreadComm& c) {
    auto y = all_reduce(Sharded<double, Partial>(local_of(c.rank()), rows, cols, Group(c)));
    if (c.rank() == me) ref = y.local();
  });
  REQUIRE(got.local().size() == ref.size());
  CHECK(std::memcmp(got.local().data(), ref.data(), sizeof(double) * static_cast<std::size_t>(ref.size())) == 0);
}
