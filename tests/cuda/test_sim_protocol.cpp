// The simulated multi-rank communicator's protocol (include/shardalg/comm/sim_world.hpp), on
// host memory: no GPU needed. SimComm<HostSimOps> runs exactly the bookkeeping that
// SimComm<CudaSimOps> runs on one GPU (who publishes what, which chunk each rank reduces, block
// offsets, barriers, the buffered mailbox, abort), with memmove instead of cudaMemcpyAsync.
// Checked here: raw collective semantics for ragged sizes and several dtypes, the core's whole
// matmul rule table and every redistribution against dense at P = 1, 2, 3, 4, 8, the ledger
// decorator on top, and the error paths with their exact messages.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>

#include "../support/all_to_allv_cases.hpp"
#include "cuda_testing.hpp"
#include "shardalg/comm/sim_world.hpp"

using namespace shardalg;
using cuda::HostSimOps;
using cuda::run_host_sim_ranks;
using HostComm = cuda::SimComm<HostSimOps>;

static_assert(Communicator<HostComm>);

namespace {
const std::vector<int> kSizes = {1, 2, 3, 4, 8};
}

TEST_CASE("sim protocol: raw collectives on ragged sizes") {
  for (int P : kSizes) {
    CAPTURE(P);
    const std::size_t n = 7;  // not divisible by most P: exercises the chunk split of all_reduce
    std::vector<std::vector<std::int64_t>> ar(P), gathered(P), rs(P), a2a(P), bc(P), ring(P);
    std::vector<std::vector<float>> arf_max(P);
    run_host_sim_ranks(P, [&](HostComm& c) {
      const int r = c.rank();
      std::vector<std::int64_t> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<std::int64_t>(100 * r + i);
      auto y = x;
      c.all_reduce(y.data(), n, DType::i64, ReduceOp::sum);
      ar[r] = y;
      std::vector<float> f(n);
      for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>((r * 7 + static_cast<int>(i) * 3) % 11);
      c.all_reduce(f.data(), n, DType::f32, ReduceOp::max);
      arf_max[r] = f;
      // all_gather in place: send = recv + rank·n
      std::vector<std::int64_t> g(P * n);
      std::copy(x.begin(), x.end(), g.begin() + r * n);
      c.all_gather(g.data() + r * n, g.data(), n, DType::i64);
      gathered[r] = g;
      // reduce_scatter: rank r gets block r of the sum of the P·n vectors
      std::vector<std::int64_t> big(P * n), out(n);
      std::iota(big.begin(), big.end(), static_cast<std::int64_t>(r));
      c.reduce_scatter(big.data(), out.data(), n, DType::i64, ReduceOp::sum);
      rs[r] = out;
      // all_to_all: block s of rank r's send is 1000·r + s
      std::vector<std::int64_t> snd(P * n), rcv(P * n);
      for (int s = 0; s < P; ++s) std::fill(snd.begin() + s * n, snd.begin() + (s + 1) * n, 1000 * r + s);
      c.all_to_all(snd.data(), rcv.data(), n, DType::i64);
      a2a[r] = rcv;
      // broadcast from the last rank
      auto b = x;
      c.broadcast(b.data(), n, DType::i64, P - 1);
      bc[r] = b;
      // ring send/recv (buffered: everyone sends first)
      if (P > 1) {
        c.send(x.data(), n, DType::i64, (r + 1) % P);
        std::vector<std::int64_t> got(n);
        c.recv(got.data(), n, DType::i64, (r + P - 1) % P);
        ring[r] = got;
      }
      c.barrier();
      if (r == 0) CHECK_EQ(c.world().pending_messages(), 0u);  // checked on rank 0 only; safe after the barrier
    });
    for (int r = 0; r < P; ++r) {
      for (std::size_t i = 0; i < n; ++i) {
        std::int64_t sum = 0;
        float mx = 0;
        for (int s = 0; s < P; ++s) {
          sum += 100 * s + static_cast<std::int64_t>(i);
          mx = std::max(mx, static_cast<float>((s * 7 + static_cast<int>(i) * 3) % 11));
        }
        CHECK_EQ(ar[r][i], sum);
        CHECK_EQ(arf_max[r][i], mx);
        std::int64_t rsum = 0;
        for (int s = 0; s < P; ++s) rsum += s + static_cast<std::int64_t>(r * n + i);
        CHECK_EQ(rs[r][i], rsum);
        CHECK_EQ(bc[r][i], 100 * (P - 1) + static_cast<std::int64_t>(i));
        if (P > 1) CHECK_EQ(ring[r][i], 100 * ((r + P - 1) % P) + static_cast<std::int64_t>(i));
      }
      for (int s = 0; s < P; ++s)
        for (std::size_t i = 0; i < n; ++i) {
          CHECK_EQ(gathered[r][s * n + i], 100 * s + static_cast<std::int64_t>(i));
          CHECK_EQ(a2a[r][s * n + i], 1000 * s + r);
        }
    }
  }
}

TEST_CASE("sim protocol: the matmul rule table against dense (CpuBackend over SimComm)") {
  for (int P : kSizes) {
    ctest::Outcomes res;
    const Index m = 4 * P, k = 2 * P, n = 3 * P;  // every dimension divisible by P
    run_host_sim_ranks(P, [&](HostComm& c) { res.add(ctest::matmul_laws<CpuBackend, float>(Group(c), m, k, n, 11 + P)); });
    // 9 valid pairs of the table × 4 transposition forms, minus the forms whose transposed kinds
    // are invalid: at least the 9 direct ones on every rank.
    CHECK_GE(res.all.size(), static_cast<std::size_t>(9 * P));
    for (const auto& o : res.all) {
      INFO(o.what, ": ", o.err);
      CHECK_EQ(o.err.max_abs, 0.0);  // integer-valued operands: exact
    }
  }
}

TEST_CASE("sim protocol: every redistribution against dense") {
  for (int P : kSizes) {
    ctest::Outcomes res;
    run_host_sim_ranks(P, [&](HostComm& c) { res.add(ctest::collective_laws<CpuBackend, double>(Group(c), 2 * P, 3 * P, 5)); });
    for (const auto& o : res.all) {
      INFO(o.what, ": ", o.err);
      CHECK(o.ok);
      CHECK_EQ(o.err.max_abs, 0.0);
    }
  }
}

TEST_CASE("sim protocol: the ledger decorates a simulated communicator") {
  std::vector<std::size_t> counts(2), bytes(2);
  run_host_sim_ranks(2, [&](HostComm& c) {
    Ledger ledger;
    Group g = ledgered(c, ledger);
    auto z = ctest::make_operand<Partial, float, CpuBackend>(g, 4, 6, 3);
    {
      auto s = ledger.scope("mlp.fwd");
      auto y = all_reduce(z);
      auto w = reduce_scatter<RowSharded>(z);
      (void)to_dense(w);  // verification traffic: not recorded
    }
    counts[c.rank()] = ledger.select("mlp.fwd").size();
    std::size_t b = 0;
    for (const auto& e : ledger.select("mlp.fwd")) b += e.bytes;
    bytes[c.rank()] = b;
  });
  for (int r = 0; r < 2; ++r) {
    CHECK_EQ(counts[r], 2u);
    CHECK_EQ(bytes[r], 2u * 24u * sizeof(float));  // all_reduce of 24 + reduce_scatter of the whole 24
  }
}

TEST_CASE("sim protocol: errors name the values, and a failing rank aborts the world") {
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(2, [](HostComm& c) { c.broadcast(nullptr, 0, DType::f32, 2); }),
                       "SimComm: broadcast root 2 is outside a group of size 2", CommError);
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(2,
                                          [](HostComm& c) {
                                            float x[4] = {};
                                            if (c.rank() == 0) c.send(x, 4, DType::f32, 1);
                                            else c.recv(x, 2, DType::f32, 0);
                                          }),
                       "SimComm: rank 1 expected 8 bytes from rank 0, got 16", CommError);
  // Rank 1 fails before the collective; rank 0, waiting in it, is released with a CommError and
  // run_sim_ranks rethrows rank 1's own exception.
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(2,
                                          [](HostComm& c) {
                                            if (c.rank() == 1) throw std::runtime_error("rank 1 failed");
                                            float x = 1;
                                            c.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
                                          }),
                       "rank 1 failed", std::runtime_error);
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(0, [](HostComm&) {}), "run_sim_ranks: world size 0 must be at least 1",
                       CommError);
  // A message never received is released with the world (no leak, no crash).
  run_host_sim_ranks(2, [](HostComm& c) {
    float x = 0;
    if (c.rank() == 0) c.send(&x, 1, DType::f32, 1);
  });
}

TEST_CASE("sim protocol: split makes the mesh's axis groups (2x2, 2x2x2); a failure in one axis ends the run") {
  for (const auto& axes : {std::vector<AxisSpec>{{"dp", 2}, {"tp", 2}}, std::vector<AxisSpec>{{"dp", 2}, {"pp", 2}, {"tp", 2}}}) {
    int world = 1;
    for (const auto& a : axes) world *= a.size;
    CAPTURE(world);
    run_host_sim_ranks(world, [&](HostComm& c) {
      Mesh mesh(Group(c), axes);
      // The tp group of world rank r holds the ranks that differ from it in the last coordinate
      // only (TP fastest): Σ of (rank + 1) over them, written out.
      Group t = mesh.group("tp");
      double x = c.rank() + 1;
      t.all_reduce(&x, 1, DType::f64, ReduceOp::sum);
      const int base = c.rank() - c.rank() % 2;
      CHECK(x == (base + 1) + (base + 2));
      CHECK(t.rank() == c.rank() % 2);
      Group d = mesh.group("dp");
      CHECK(d.rank() == c.rank() / (world / 2));
      double y = c.rank();
      d.all_reduce(&y, 1, DType::f64, ReduceOp::sum);
      CHECK(y == (c.rank() % (world / 2)) * 2 + world / 2);
    });
  }
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(2, [](HostComm& c) { (void)c.split(-2, 0); }),
                       "SimComm::split: color -2 is negative", CommError);
  // Rank 3 fails; rank 2, waiting in a tp all_reduce (a sub-world), is released by the abort.
  CHECK_THROWS_WITH_AS(run_host_sim_ranks(4,
                                          [](HostComm& c) {
                                            Mesh mesh(Group(c), {{"dp", 2}, {"tp", 2}});
                                            if (c.rank() == 3) throw std::runtime_error("rank 3 failed");
                                            Group t = mesh.group("tp");
                                            double x = 1;
                                            t.all_reduce(&x, 1, DType::f64, ReduceOp::sum);
                                          }),
                       "rank 3 failed", std::runtime_error);
}

TEST_CASE("sim protocol: all_to_allv with random counts and zeros, its count check, isend/irecv") {
  namespace a2av = testing::a2av;
  for (int P : kSizes) {
    CAPTURE(P);
    for (std::uint64_t seed = 0; seed < 3; ++seed) {
      const auto c = a2av::counts(P, 17 * seed + static_cast<std::uint64_t>(P));
      std::vector<std::size_t> wrong(static_cast<std::size_t>(P), 99);
      std::vector<std::size_t> elements(static_cast<std::size_t>(P), 0);
      run_host_sim_ranks(P, [&](HostComm& comm) {
        Ledger ledger;
        Group g = ledgered(comm, ledger);
        std::size_t w = a2av::run_and_count_wrong<double>(g, c, CallInfo{"Row", "Row"});
        w += a2av::run_and_count_wrong<std::int32_t>(g, c);
        wrong[static_cast<std::size_t>(comm.rank())] = w;
        elements[static_cast<std::size_t>(comm.rank())] = ledger.entries().at(0).elements;
      });
      for (int r = 0; r < P; ++r) {
        std::size_t sent = 0;
        for (auto k : c[static_cast<std::size_t>(r)]) sent += k;
        CHECK(wrong[static_cast<std::size_t>(r)] == 0);
        CHECK(elements[static_cast<std::size_t>(r)] == sent);  // all_to_all of Σ send_counts
      }
    }
    std::vector<int> ring(static_cast<std::size_t>(P), 99);
    run_host_sim_ranks(P, [&](HostComm& comm) {
      Group g = comm;
      CHECK(g.async_p2p());
      ring[static_cast<std::size_t>(comm.rank())] = a2av::ring_exchange(g, 5);
      comm.barrier();
      if (comm.rank() == 0) CHECK_EQ(comm.world().pending_messages(), 0u);
    });
    for (int w : ring) CHECK(w == 0);
  }
  // The counts are compared before any copy: the same error on every rank.
  std::vector<std::string> got(3, "ok");
  run_host_sim_ranks(3, [&](HostComm& comm) {
    Group g = comm;
    try {
      a2av::mismatched_counts(g);
    } catch (const CollectiveMismatchError& e) {
      got[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  for (const auto& s : got) CHECK(s == std::string("SimComm: ") + a2av::mismatched_counts_text);
  // irecv's test() does not block: false until rank 1 has sent (after the barrier).
  std::vector<int> seen(2, -1);
  run_host_sim_ranks(2, [&](HostComm& comm) {
    double x = 0;
    if (comm.rank() == 0) {
      Request rq = comm.irecv(&x, 1, DType::f64, 1);
      seen[0] = rq.test() ? 1 : 0;
      comm.barrier();
      comm.barrier();
      rq.wait();
      seen[1] = x == 7.0;
    } else {
      comm.barrier();
      x = 7.0;
      Request rq = comm.isend(&x, 1, DType::f64, 0);
      comm.barrier();
    }
  });
  CHECK(seen == std::vector<int>{0, 1});
  // Receives match in posting order, whatever order they are waited for.
  std::vector<int> order(1, 0);
  run_host_sim_ranks(2, [&](HostComm& comm) {
    if (comm.rank() == 0) {
      const double a[2] = {1, 2}, b[3] = {3, 4, 5};
      comm.send(a, 2, DType::f64, 1);
      comm.send(b, 3, DType::f64, 1);
    } else {
      double a[2] = {}, b[3] = {};
      Request ra = comm.irecv(a, 2, DType::f64, 0);
      Request rb = comm.irecv(b, 3, DType::f64, 0);
      rb.wait();
      ra.wait();
      order[0] = a[1] == 2 && b[2] == 5;
    }
  });
  CHECK(order[0] == 1);
}
