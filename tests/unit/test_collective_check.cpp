// Issue 14, mismatched collectives on ThreadComm: checked mode (on in every test: see
// tests/support/doctest_main.cpp) raises CollectiveMismatchError on every rank, before any data
// moves, with a text naming both sides; the watchdog turns a wait that never ends into a
// CollectiveTimeoutError; unchecked, a size mismatch is still an error, never a read or write past
// a peer's buffer; a failing rank's own CommError is what run_ranks rethrows; a thread that cannot
// be started is a ThreadStartError.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "mismatch_cases.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace mm = testing::mismatch;

namespace {

/// What each rank's body raised, as "<Type>: <what()>" ("ok" when nothing). Each rank catches
/// its own error and returns, so no rank is aborted by another's failure.
template <class Body>
std::vector<std::string> per_rank(int p, Body body) {
  std::vector<std::string> got(static_cast<std::size_t>(p), "ok");
  try {
  run_ranks(p, [&](ThreadComm& c) {
    std::string& out = got[static_cast<std::size_t>(c.rank())];
    try {
      Group g = c;
      body(g);
    } catch (const CollectiveMismatchError& e) {
      out = std::string("CollectiveMismatchError: ") + e.what();
    } catch (const CollectiveTimeoutError& e) {
      out = std::string("CollectiveTimeoutError: ") + e.what();
    } catch (const CommAbortedError& e) {
      out = std::string("CommAbortedError: ") + e.what();
    } catch (const CommError& e) {
      out = std::string("CommError: ") + e.what();
    } catch (const std::exception& e) {
      out = std::string("other: ") + e.what();
    }
  });
  } catch (const CommAbortedError&) {
    // After a timeout the world is aborted: the end-of-body rendezvous run_ranks adds then fails.
  }
  return got;
}

/// The watchdog's limit for a test, and back to the default after.
struct Timeout {
  explicit Timeout(double s) { set_collective_timeout(s); }
  ~Timeout() { set_collective_timeout(0); }
};

}  // namespace

TEST_CASE("checked mode is on in every test, and has a switch") {
  CHECK(check_collectives());
  {
    CollectiveCheck off(false);
    CHECK_FALSE(check_collectives());
  }
  CHECK(check_collectives());
}

TEST_CASE("checked: each mismatch case raises CollectiveMismatchError on every rank, naming both sides") {
  for (const auto& k : mm::cases()) {
    CAPTURE(k.name);
    const std::string want = std::string("CollectiveMismatchError: ThreadComm: ") + k.checked;
    const auto got = per_rank(2, k.body);
    CHECK(got[0] == want);
    CHECK(got[1] == want);
  }
}

TEST_CASE("checked: a rank that skips a collective meets the others' call at the end of its body") {
  const std::string want =
      "CollectiveMismatchError: ThreadComm: mismatched collectives: rank 0: all_reduce f64 × 8 (#1); rank 1: the end "
      "of its run_ranks body (#1)";
  // Rank 1 calls the end-of-body rendezvous itself, so that its error is caught like rank 0's.
  std::vector<std::string> seen(2, "ok");
  run_ranks(2, [&](ThreadComm& c) {
    try {
      Group g = c;
      if (c.rank() == 0) mm::all_reduce_f64(g, 8);
      else c.end_of_body();  // what run_ranks does when rank 1's body returns
    } catch (const CollectiveMismatchError& e) {
      seen[static_cast<std::size_t>(c.rank())] = std::string("CollectiveMismatchError: ") + e.what();
    }
  });
  CHECK(seen[0] == want);
  CHECK(seen[1] == want);
  // And as a user writes it: rank 1 simply returns; run_ranks raises (rank 0's error, the same text).
  CHECK_THROWS_WITH_AS(run_ranks(2,
                                 [](ThreadComm& c) {
                                   Group g = c;
                                   if (c.rank() == 0) mm::all_reduce_f64(g, 8);
                                 }),
                       want.substr(std::string("CollectiveMismatchError: ").size()).c_str(), CollectiveMismatchError);
}

TEST_CASE("checked: a mismatch leaves the group usable; the next collectives match again") {
  std::vector<double> out(2, 0.0);
  run_ranks(2, [&](ThreadComm& c) {
    Group g = c;
    CHECK_THROWS_AS(mm::all_reduce_f64(g, c.rank() == 0 ? 8 : 6), CollectiveMismatchError);
    double x = 1.0 + c.rank();
    g.all_reduce(&x, 1);
    out[static_cast<std::size_t>(c.rank())] = x;
  });
  CHECK(out == std::vector<double>{3.0, 3.0});
}

TEST_CASE("checked: the watchdog names what every rank is in") {
  Timeout t(0.3);
  SUBCASE("a rank that never arrives") {
    const auto got = per_rank(2, [](Group& g) {
      if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      mm::all_reduce_f64(g, 8);
    });
    CHECK(got[0] ==
          "CollectiveTimeoutError: ThreadComm: rank 0 waited more than 0.3 s in all_reduce f64 × 8 (#1); rank 1 is "
          "not in a collective (its last: none)");
    CHECK(got[1] == "CommAbortedError: ThreadComm: another rank failed; collective aborted");
  }
  SUBCASE("two ranks wait in the all_reduce, the third in a recv whose send never comes") {
    const auto got = per_rank(3, [](Group& g) {
      if (g.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));  // its deadline comes last
        double x = 0;
        g.recv(&x, 1, DType::f64, 0);
      } else {
        mm::all_reduce_f64(g, 8);
      }
    });
    // Whichever of ranks 0 and 1 times out first raises; the others are aborted.
    const std::string w0 =
        "CollectiveTimeoutError: ThreadComm: rank 0 waited more than 0.3 s in all_reduce f64 × 8 (#1); rank 1 waits "
        "in all_reduce f64 × 8 (#1); rank 2 waits in recv from rank 0";
    const std::string w1 =
        "CollectiveTimeoutError: ThreadComm: rank 1 waited more than 0.3 s in all_reduce f64 × 8 (#1); rank 0 waits "
        "in all_reduce f64 × 8 (#1); rank 2 waits in recv from rank 0";
    const std::string aborted = "CommAbortedError: ThreadComm: another rank failed; collective aborted";
    CHECK(((got[0] == w0 && got[1] == aborted) || (got[0] == aborted && got[1] == w1)));
    CHECK(got[2] == aborted);
  }
  SUBCASE("a recv whose send never comes, alone") {
    const auto got = per_rank(2, [](Group& g) {
      if (g.rank() == 1) {
        double x = 0;
        g.recv(&x, 1, DType::f64, 0);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      }
    });
    CHECK(got[0] == "ok");
    CHECK(got[1] ==
          "CollectiveTimeoutError: ThreadComm: rank 1 waited more than 0.3 s in recv of 8 bytes from rank 0; rank 0 "
          "is not in a collective (its last: none)");
  }
}

TEST_CASE("point to point: a send of 8 and a recv of 6 is a CommError on the receiver (checked or not)") {
  for (bool on : {true, false}) {
    CollectiveCheck mode(on);
    const auto got = per_rank(2, [](Group& g) {
      std::vector<double> x(8, 1.0);
      if (g.rank() == 0) g.send(x.data(), 8, DType::f64, 1);
      else g.recv(x.data(), 6, DType::f64, 0);
    });
    CHECK(got[0] == "ok");
    CHECK(got[1] == "CommError: ThreadComm: rank 1 expected 48 bytes from rank 0, got 64");
  }
}

TEST_CASE("unchecked: a size mismatch is still an error on every rank, never a read past a buffer") {
  CollectiveCheck off(false);
  const std::string tail = " (set_check_collectives(true) names the calls)";
  const std::vector<std::pair<std::string, std::string>> expect = {
      {"swapped order", "rank 0: all_reduce of 64 bytes; rank 1: all_gather of 32 bytes"},
      {"all_reduce of 8 vs all_gather of 4", "rank 0: all_reduce of 64 bytes; rank 1: all_gather of 32 bytes"},
      {"counts 8 vs 6", "rank 0: all_reduce of 64 bytes; rank 1: all_reduce of 48 bytes"},
      {"f64 vs f32", "rank 0: all_reduce of 64 bytes; rank 1: all_reduce of 32 bytes"},
      {"all_gather blocks 4 vs 3", "rank 0: all_gather of 32 bytes; rank 1: all_gather of 24 bytes"},
      {"reduce_scatter blocks 4 vs 3", "rank 0: reduce_scatter of 32 bytes; rank 1: reduce_scatter of 24 bytes"},
      {"all_to_all blocks 4 vs 3", "rank 0: all_to_all of 32 bytes; rank 1: all_to_all of 24 bytes"},
  };
  for (const auto& e : expect) {  // no structured bindings: CAPTURE's lambda (Clang 14)
    const std::string& name = e.first;
    const std::string& sides = e.second;
    CAPTURE(name);
    const auto* k = &mm::cases().front();
    for (const auto& c : mm::cases())
      if (name == c.name) k = &c;
    REQUIRE(name == k->name);
    const std::string want = "CollectiveMismatchError: ThreadComm: mismatched collectives: " + sides + tail;
    const auto got = per_rank(2, k->body);
    CHECK(got[0] == want);
    CHECK(got[1] == want);
  }
  // What only checked mode catches: the same bytes, different meaning. Unchecked these run and give
  // wrong results (the two "one rank skips" and "barrier vs all_reduce" cases hang: not run here).
  const auto roots = per_rank(2, mm::cases()[5].body);  // broadcast roots differ
  CHECK(std::string(mm::cases()[5].name) == "broadcast roots differ");
  CHECK(roots == std::vector<std::string>{"ok", "ok"});
  const auto ops = per_rank(2, mm::cases()[9].body);  // sum vs max
  CHECK(std::string(mm::cases()[9].name) == "sum vs max");
  CHECK(ops == std::vector<std::string>{"ok", "ok"});
}

TEST_CASE("run_ranks rethrows the failing rank's own CommError, not a bystander's abort") {
  for (bool on : {true, false}) {
    CollectiveCheck mode(on);
    CHECK_THROWS_WITH_AS(run_ranks(3,
                                   [](ThreadComm& c) {
                                     double x[8] = {};
                                     if (c.rank() == 2) c.broadcast(x, 8, DType::f64, 7);  // a CommError of its own
                                     c.all_reduce(x, 8, DType::f64, ReduceOp::sum);         // ranks 0, 1: aborted
                                   }),
                         "ThreadComm: broadcast root 7 is outside a group of size 3", CommError);
  }
}

TEST_CASE("a thread that cannot be started is a ThreadStartError (injected failure), the others released") {
  // Tested by injection (detail::fail_thread_start_at makes the start of that rank's thread throw
  // std::system_error as std::thread does when the system has no threads left), not by
  // exhausting the machine's threads.
  struct Inject {
    Inject() { detail::fail_thread_start_at() = 2; }
    ~Inject() { detail::fail_thread_start_at() = -1; }
  } inject;
  std::atomic<int> aborted{0};
  try {
    run_ranks(4, [&](ThreadComm& c) {
      try {
        double x = 1;
        c.all_reduce(&x, 1, DType::f64, ReduceOp::sum);  // rank 1 waits here until released
      } catch (const CommAbortedError&) {
        ++aborted;
        throw;
      }
    });
    FAIL("run_ranks did not throw");
  } catch (const ThreadStartError& e) {
    const std::string what = e.what();
    CHECK(what.rfind("run_ranks: could not start the thread of rank 2 of 4: injected (detail::fail_thread_start_at)", 0) ==
          0);
  }
  CHECK(aborted == 1);  // rank 1 had started; rank 0 never ran its body
}

TEST_CASE("checked: the watchdog on one group names a rank that waits in another group's collective") {
  // Four ranks, two ways to pair them: X = {0, 1}, {2, 3} and Y = {0, 2}, {1, 3} (a mesh's two
  // axes). Rank 0 waits in X's all_reduce for rank 1, which waits in Y's for rank 3, which never
  // comes. Rank 0's watchdog says where rank 1 is — not "not in a collective".
  Timeout t(0.3);
  std::vector<std::string> got(4, "ok");
  try {
    run_ranks(4, [&](ThreadComm& c) {
      ThreadComm x = c.split(c.rank() / 2, c.rank()), y = c.split(c.rank() % 2, c.rank());
      std::string& out = got[static_cast<std::size_t>(c.rank())];
      try {
        Group gx = x, gy = y;
        if (c.rank() == 0) mm::all_reduce_f64(gx, 8);
        if (c.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's deadline comes first
          mm::all_reduce_f64(gy, 8);
        }
        if (c.rank() >= 2)  // their end-of-body rendezvous must not time out before rank 0 does
          std::this_thread::sleep_for(std::chrono::milliseconds(600));
      } catch (const CommError& e) {
        out = e.what();
      }
    });
  } catch (const CommError&) {
    // the end-of-body rendezvous fails after the timeouts
  }
  CHECK(got[0] ==
        "ThreadComm: rank 0 waited more than 0.3 s in all_reduce f64 × 8 (#1); rank 1 waits in all_reduce f64 × 8 "
        "(#1) on another group of 2 ranks");
}
