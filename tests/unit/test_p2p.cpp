// The communicator extensions of issues 16 and 17 on ThreadComm and SelfComm: the variable
// all-to-all (counts per peer, zeros included; the checked mode's count comparison and its text,
// and the same error unchecked, never a read past a buffer), non-blocking point to point
// (irecv's test() never blocks, receives posted before sends do not deadlock, Group's fallback
// for a communicator without them), and what the ledger records (all_to_all with Σ send_counts
// elements; send/recv with the peer).
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "all_to_allv_cases.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace a2av = testing::a2av;

namespace {

/// What each rank's body raised, "ok" when nothing (each rank catches its own error).
template <class Body>
std::vector<std::string> per_rank(int p, Body body) {
  std::vector<std::string> got(static_cast<std::size_t>(p), "ok");
  run_ranks(p, [&](ThreadComm& c) {
    std::string& out = got[static_cast<std::size_t>(c.rank())];
    try {
      Group g = c;
      body(g);
    } catch (const CollectiveMismatchError& e) {
      out = std::string("CollectiveMismatchError: ") + e.what();
    } catch (const std::exception& e) {
      out = std::string("other: ") + e.what();
    }
  });
  return got;
}

/// A communicator with the concept's calls only (no all_to_allv, no isend/irecv): Group's
/// fallbacks.
struct PlainComm {
  ThreadComm c;
  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  std::uintptr_t key() const { return c.key(); }
  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op) { c.all_reduce(b, n, t, op); }
  void all_gather(const void* s, void* r, std::size_t n, DType t) { c.all_gather(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) { c.reduce_scatter(s, r, n, t, op); }
  void all_to_all(const void* s, void* r, std::size_t n, DType t) { c.all_to_all(s, r, n, t); }
  void broadcast(void* b, std::size_t n, DType t, int root) { c.broadcast(b, n, t, root); }
  void send(const void* b, std::size_t n, DType t, int peer) { c.send(b, n, t, peer); }
  void recv(void* b, std::size_t n, DType t, int peer) { c.recv(b, n, t, peer); }
  void barrier() { c.barrier(); }
};
static_assert(Communicator<PlainComm> && !VariableAllToAll<PlainComm> && !AsyncPointToPoint<PlainComm>);

}  // namespace

TEST_CASE("all_to_allv on ThreadComm: random counts with zeros, P = 1 … 8, four dtypes, exact") {
  for (int p = 1; p <= 8; ++p) {
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      CAPTURE(p);
      CAPTURE(seed);
      const auto c = a2av::counts(p, 100 * seed + static_cast<std::uint64_t>(p));
      std::vector<std::size_t> wrong(static_cast<std::size_t>(p), 99);
      run_ranks(p, [&](ThreadComm& comm) {
        Group g = comm;
        std::size_t w = a2av::run_and_count_wrong<double>(g, c);
        w += a2av::run_and_count_wrong<float>(g, c);
        w += a2av::run_and_count_wrong<std::int64_t>(g, c);
        w += a2av::run_and_count_wrong<std::int32_t>(g, c);
        wrong[static_cast<std::size_t>(comm.rank())] = w;
      });
      for (auto w : wrong) CHECK(w == 0);
    }
  }
  // Every count zero: nothing moves, nothing is touched (the guard stays).
  run_ranks(3, [&](ThreadComm& comm) {
    const std::vector<std::vector<std::size_t>> zero(3, std::vector<std::size_t>(3, 0));
    CHECK(a2av::run_and_count_wrong<double>(Group(comm), zero) == 0);
  });
}

TEST_CASE("all_to_allv: mismatched counts are a CollectiveMismatchError on every rank, checked or not") {
  for (bool on : {true, false}) {
    CollectiveCheck mode(on);
    CAPTURE(on);
    for (int p : {2, 3, 4}) {
      const auto got = per_rank(p, a2av::mismatched_counts);
      for (const auto& s : got) CHECK(s == std::string("CollectiveMismatchError: ThreadComm: ") + a2av::mismatched_counts_text);
    }
  }
  // Checked: all_to_allv against all_to_all is named by the fingerprints (the counts differ by
  // rank in an all_to_allv and are not part of the comparison; its text shows this rank's total).
  const auto got = per_rank(2, [](Group& g) {
    std::vector<double> s(8, 1.0), r(8, 0.0);
    if (g.rank() == 0) {
      const std::size_t c[2] = {4, 4};
      g.all_to_allv(s.data(), c, r.data(), c);
    } else {
      g.all_to_all(s.data(), r.data(), 4);
    }
  });
  const std::string want =
      "CollectiveMismatchError: ThreadComm: mismatched collectives: rank 0: all_to_allv f64 × 8 (#1); rank 1: "
      "all_to_all f64 × 4 (#1)";
  CHECK(got[0] == want);
  CHECK(got[1] == want);
  // The group is usable after a mismatch.
  std::vector<std::size_t> wrong(3, 99);
  run_ranks(3, [&](ThreadComm& comm) {
    Group g = comm;
    CHECK_THROWS_AS(a2av::mismatched_counts(g), CollectiveMismatchError);
    wrong[static_cast<std::size_t>(comm.rank())] = a2av::run_and_count_wrong<double>(g, a2av::counts(3, 7));
  });
  CHECK(wrong == std::vector<std::size_t>{0, 0, 0});
}

TEST_CASE("all_to_allv on SelfComm, and a communicator without it") {
  Group self = SelfComm{};
  CHECK(a2av::run_and_count_wrong<double>(self, {{5}}) == 0);
  const std::size_t sc = 4, rc = 3;
  std::vector<double> s(4), r(3);
  CHECK_THROWS_WITH_AS(self.all_to_allv(s.data(), &sc, r.data(), &rc),
                       "SelfComm: mismatched all_to_allv counts: rank 0 expects 3 elements from rank 0, which sends it 4",
                       CollectiveMismatchError);
  run_ranks(2, [](ThreadComm& c) {
    Group g = PlainComm{c};
    const std::size_t k[2] = {1, 1};
    double s[2] = {1, 2}, r[2] = {0, 0};
    CHECK_THROWS_WITH_AS(g.all_to_allv(s, k, r, k), "Group::all_to_allv: a communicator has no all_to_allv", CommError);
  });
}

TEST_CASE("the ledger records all_to_allv as all_to_all with this rank's Σ send_counts, and the layouts") {
  const auto c = a2av::counts(4, 11);
  std::vector<std::size_t> elements(4), bytes(4), wrong(4);
  std::vector<std::string> layouts(4), kinds(4);
  run_ranks(4, [&](ThreadComm& comm) {
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    const auto r = static_cast<std::size_t>(comm.rank());
    wrong[r] = a2av::run_and_count_wrong<float>(g, c, CallInfo{"Row", "Row"});
    REQUIRE(ledger.entries().size() == 1);
    const auto& e = ledger.entries()[0];
    elements[r] = e.elements;
    bytes[r] = e.bytes;
    layouts[r] = e.layout_in + " -> " + e.layout_out;
    kinds[r] = std::string(to_string(e.kind));
    CHECK(e.peer == -1);
  });
  for (std::size_t r = 0; r < 4; ++r) {
    std::size_t sent = 0;
    for (auto k : c[r]) sent += k;
    CHECK(wrong[r] == 0);
    CHECK(kinds[r] == "all_to_all");
    CHECK(elements[r] == sent);
    CHECK(bytes[r] == sent * sizeof(float));
    CHECK(layouts[r] == "Row -> Row");
  }
}

TEST_CASE("isend/irecv on ThreadComm: receives posted first, test() never blocks, the ledger names the peer") {
  for (int p = 1; p <= 5; ++p) {
    std::vector<int> wrong(static_cast<std::size_t>(p), 99);
    run_ranks(p, [&](ThreadComm& c) { wrong[static_cast<std::size_t>(c.rank())] = a2av::ring_exchange(Group(c), 6); });
    for (int w : wrong) CHECK(w == 0);
  }
  // test() is false until the message is there: rank 1 sends only after a barrier rank 0 reaches
  // after its first test().
  std::vector<int> seen(3, -1);
  run_ranks(2, [&](ThreadComm& c) {
    Ledger ledger;
    Group g = ledgered(c, ledger);
    CHECK(g.async_p2p());
    double x = 0;
    if (c.rank() == 0) {
      Request rq = g.irecv(&x, 1, DType::f64, 1);
      seen[0] = rq.test() ? 1 : 0;
      g.barrier();
      g.barrier();  // rank 1 has sent
      seen[1] = rq.test() ? 1 : 0;
      rq.wait();
      seen[2] = x == 42.0;
      REQUIRE(ledger.entries().size() == 1);
      CHECK(ledger.entries()[0].kind == CollectiveKind::recv);
      CHECK(ledger.entries()[0].peer == 1);
    } else {
      g.barrier();
      x = 42.0;
      Request rq = g.isend(&x, 1, DType::f64, 0);
      g.barrier();
      rq.wait();
      REQUIRE(ledger.entries().size() == 1);
      CHECK(ledger.entries()[0].kind == CollectiveKind::send);
      CHECK(ledger.entries()[0].peer == 0);
      CHECK(ledger.entries()[0].elements == 1);
    }
  });
  CHECK(seen == std::vector<int>{0, 1, 1});
}

TEST_CASE("irecv matches in posting order, whatever order the requests are waited for (as MPI)") {
  std::vector<int> ok(2, 0);
  run_ranks(2, [&](ThreadComm& c) {
    Group g = c;
    if (c.rank() == 0) {
      const double a[2] = {1, 2}, b[3] = {3, 4, 5};
      g.send(a, 2, DType::f64, 1);
      g.send(b, 3, DType::f64, 1);
      ok[0] = 1;
    } else {
      double a[2] = {}, b[3] = {};
      Request ra = g.irecv(a, 2, DType::f64, 0);
      Request rb = g.irecv(b, 3, DType::f64, 0);
      rb.wait();  // the second posted takes the second message
      ra.wait();
      ok[1] = a[0] == 1 && a[1] == 2 && b[0] == 3 && b[2] == 5;
    }
  });
  CHECK(ok == std::vector<int>{1, 1});
}

TEST_CASE("a message sent after its irecv was posted lands in the posted buffer; a size mismatch is named") {
  std::vector<std::string> got(2, "ok");
  run_ranks(2, [&](ThreadComm& c) {
    Group g = c;
    try {
      if (c.rank() == 1) {
        std::vector<double> a(3, 0.0), b(6, 0.0);
        Request ra = g.irecv(a.data(), 3, DType::f64, 0);  // posted before rank 0 sends (the barrier)
        Request rb = g.irecv(b.data(), 6, DType::f64, 0);
        g.barrier();
        ra.wait();
        if (a != std::vector<double>{1, 2, 3}) got[1] = "wrong values";
        rb.wait();
      } else {
        g.barrier();
        const double a[3] = {1, 2, 3}, b[8] = {};
        g.send(a, 3, DType::f64, 1);
        g.send(b, 8, DType::f64, 1);
      }
    } catch (const CommError& e) {
      got[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  CHECK(got[0] == "ok");
  CHECK(got[1] == "ThreadComm: rank 1 expected 48 bytes from rank 0, got 64");
}

TEST_CASE("a posted irecv dropped while another error unwinds does not end the process") {
  // Rank 0 fails; rank 1, holding a receive from it, is released from its barrier by the abort:
  // unwinding destroys the Request, whose wait fails too — dropped, not std::terminate.
  CHECK_THROWS_WITH_AS(run_ranks(2,
                                 [](ThreadComm& c) {
                                   Group g = c;
                                   if (c.rank() == 0) throw std::runtime_error("rank 0 failed");
                                   double x = 0;
                                   Request rq = g.irecv(&x, 1, DType::f64, 0);
                                   g.barrier();
                                 }),
                       "rank 0 failed", std::runtime_error);
}

TEST_CASE("isend/irecv fallback: a communicator without them sends at the call and receives at wait()") {
  for (int p : {2, 3}) {
    std::vector<int> wrong(static_cast<std::size_t>(p), 99);
    std::vector<std::size_t> recorded(static_cast<std::size_t>(p), 0);
    run_ranks(p, [&](ThreadComm& c) {
      Ledger ledger;
      Group plain = PlainComm{c};
      CHECK_FALSE(plain.async_p2p());
      Group g = ledgered(plain, ledger);
      CHECK_FALSE(g.async_p2p());
      wrong[static_cast<std::size_t>(c.rank())] = a2av::ring_exchange(g, 3);
      std::size_t peers = 0;  // send and recv entries, each naming a neighbour
      for (const auto& e : ledger.entries()) peers += e.peer == (c.rank() + 1) % p || e.peer == (c.rank() + p - 1) % p;
      recorded[static_cast<std::size_t>(c.rank())] = peers;
    });
    for (int w : wrong) CHECK(w == 0);
    for (auto n : recorded) CHECK(n == 4);
  }
}

// ---- A message is what its receive expects, not only as many bytes (comm/p2p_check.hpp) ----

TEST_CASE("a message of equal bytes and another dtype or shape is a mismatch, named by the receiver, its buffer untouched") {
  // Three int64 read as three doubles; a (seq 8, batch 1) block read as (seq 4, batch 2): the same
  // bytes. Posted before the send (the sender copies) and after it (the receiver copies).
  for (bool posted_first : {false, true}) {
    CAPTURE(posted_first);
    std::vector<std::string> got(2, "ok");
    std::vector<double> kept(2, -1);
    run_ranks(2, [&](ThreadComm& c) {
      Group g = c;
      CallInfo mine{"R", "R"}, theirs{"R", "R"};
      mine.dims = {4, 2, 16};
      theirs.dims = {8, 1, 16};
      try {
        if (c.rank() == 0) {
          if (posted_first) g.barrier();
          const std::int64_t shape[3] = {8, 1, 16};
          g.send(shape, 3, DType::i64, 1);
          const double block[4] = {1, 2, 3, 4};
          g.send(block, 4, DType::f64, 1, theirs);
          if (!posted_first) g.barrier();
        } else {
          double a[3] = {-1, -1, -1}, b[4] = {-1, -1, -1, -1};
          Request ra = g.irecv(a, 3, DType::f64, 0);
          Request rb = g.irecv(b, 4, DType::f64, 0, mine);
          g.barrier();  // rank 0 sends after it when posted_first
          try {
            ra.wait();
          } catch (const CollectiveMismatchError& e) {
            got[1] = e.what();
          }
          try {
            rb.wait();
          } catch (const CollectiveMismatchError& e) {
            got[1] += std::string(" | ") + e.what();
          }
          kept[1] = a[0] + a[1] + a[2] + b[0] + b[1] + b[2] + b[3];
        }
      } catch (const std::exception& e) {
        got[static_cast<std::size_t>(c.rank())] = std::string("other: ") + e.what();
      }
    });
    CHECK(got[0] == "ok");
    CHECK(got[1] ==
          "ThreadComm: mismatched point-to-point: rank 1 receives f64 × 3 from rank 0, which sent i64 × 3 | "
          "ThreadComm: mismatched point-to-point: rank 1 receives f64 × 4, layout R, shape (4, 2, 16) from rank 0, "
          "which sent f64 × 4, layout R, shape (8, 1, 16)");
    CHECK(kept[1] == -7.0);  // nothing landed
  }
}

TEST_CASE("unsaid layouts and shapes match anything; the blocking recv compares too") {
  std::vector<std::string> got(2, "ok");
  run_ranks(2, [&](ThreadComm& c) {
    Group g = c;
    CallInfo said{"C", "C"};
    said.dims = {2, 3, 4};
    try {
      if (c.rank() == 0) {
        const double x[2] = {5, 6};
        g.send(x, 2, DType::f64, 1, said);  // received without a CallInfo: fine
        g.send(x, 2, DType::f64, 1);        // sent without, received with: fine
        CallInfo other{"Row", "Row"};
        g.send(x, 2, DType::f64, 1, other);  // layouts differ: a mismatch
      } else {
        double y[2] = {0, 0};
        g.recv(y, 2, DType::f64, 0);
        g.recv(y, 2, DType::f64, 0, said);
        if (y[0] != 5 || y[1] != 6) got[1] = "wrong values";
        g.recv(y, 2, DType::f64, 0, said);
      }
    } catch (const CollectiveMismatchError& e) {
      got[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  CHECK(got[0] == "ok");
  CHECK(got[1] ==
        "ThreadComm: mismatched point-to-point: rank 1 receives f64 × 2, layout C, shape (2, 3, 4) from rank 0, which "
        "sent f64 × 2, layout Row");
}

// ---- A rank that fails while it holds unfinished Requests (communicator.hpp, Request) ----

TEST_CASE("unchecked: a rank that throws while its irecv is posted ends the run; its peer is not left waiting") {
  // Rank 1 posts a receive from rank 0 and fails; rank 0 waits in a recv from rank 1, unchecked
  // (no watchdog). Waiting for the receive while unwinding would deadlock both: the Request is
  // cancelled instead, the error reaches run_ranks, the abort releases rank 0.
  CollectiveCheck off(false);
  for (int rep = 0; rep < 3; ++rep) {
    CHECK_THROWS_WITH_AS(run_ranks(2,
                                   [](ThreadComm& c) {
                                     Group g = c;
                                     double x = 0;
                                     if (c.rank() == 0) {
                                       g.recv(&x, 1, DType::f64, 1);
                                       return;
                                     }
                                     Request rq = g.irecv(&x, 1, DType::f64, 0);
                                     throw std::runtime_error("rank 1 failed in its stage");
                                   }),
                         "rank 1 failed in its stage", std::runtime_error);
  }
}

TEST_CASE("checked: a dropped Request whose wait timed out is named in the abort, not 'another rank failed'") {
  // ~Request cannot throw: the watchdog's timeout in its wait is kept by the world, and the abort
  // that follows names it — on the rank that dropped it, and in what run_ranks rethrows.
  set_collective_timeout(0.3);
  std::vector<std::string> got(2, "ok");
  std::string outer = "none";
  try {
    run_ranks(2, [&](ThreadComm& c) {
      Group g = c;
      try {
        if (c.rank() == 0) {
          double x = 0;
          { Request dropped = g.irecv(&x, 1, DType::f64, 1); }  // rank 1 never sends: the watchdog
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's deadline comes first
        }
        g.barrier();
      } catch (const std::exception& e) {
        got[static_cast<std::size_t>(c.rank())] = e.what();
      }
    });
  } catch (const CommAbortedError& e) {
    outer = e.what();
  }
  set_collective_timeout(60);
  const std::string named =
      "ThreadComm: collective aborted; rank 0 destroyed an unfinished Request whose wait failed: ThreadComm: rank 0 "
      "waited more than 0.3 s in recv of 8 bytes from rank 1; rank 1 waits in barrier (#1)";
  CHECK(got[0] == named);
  CHECK(outer == named);
}
