// The communicators' primitives: ThreadComm and SelfComm on raw buffers, uneven chunking,
// reductions other than sum, in-place gathers, point to point, determinism, and failure.
#include <doctest/doctest.h>

#include <atomic>
#include <numeric>

#include "testing.hpp"

using namespace shardalg;

TEST_CASE("ThreadComm all_reduce: sum, max, min on every length, bit-identical on every rank") {
  for (int p : testing::world_sizes)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{17}, std::size_t{1000}}) {
      CAPTURE(p);
      CAPTURE(n);
      std::vector<std::vector<double>> got(p);
      std::vector<std::vector<std::int64_t>> mx(p), mn(p);
      run_ranks(p, [&](ThreadComm& c) {
        const int r = c.rank();
        std::vector<double> v(n);
        std::vector<std::int64_t> a(n), b(n);
        for (std::size_t i = 0; i < n; ++i) {
          v[i] = 0.1 * static_cast<double>(i + 1) * (r + 1);  // not exactly representable sums
          a[i] = b[i] = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(r) * 13) % 11);
        }
        c.all_reduce(v.data(), n, DType::f64, ReduceOp::sum);
        c.all_reduce(a.data(), n, DType::i64, ReduceOp::max);
        c.all_reduce(b.data(), n, DType::i64, ReduceOp::min);
        got[r] = v;
        mx[r] = a;
        mn[r] = b;
      });
      for (std::size_t i = 0; i < n; ++i) {
        // Independent reference: the rank-order sum 0.1·(i+1)·1 + … + 0.1·(i+1)·p.
        double s = 0;
        std::int64_t hi = -1, lo = 1 << 20;
        for (int r = 0; r < p; ++r) {
          s += 0.1 * static_cast<double>(i + 1) * (r + 1);
          const auto val = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(r) * 13) % 11);
          hi = std::max(hi, val);
          lo = std::min(lo, val);
        }
        for (int r = 0; r < p; ++r) {
          CHECK(got[r][i] == s);  // rank order, every rank: bit-identical
          CHECK(mx[r][i] == hi);
          CHECK(mn[r][i] == lo);
        }
      }
    }
}

TEST_CASE("ThreadComm all_gather (also in place), reduce_scatter, all_to_all, broadcast") {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const std::size_t n = 3;
    std::vector<int> ok(p, 0);
    run_ranks(p, [&](ThreadComm& c) {
      const int r = c.rank();
      bool good = true;
      // all_gather: rank r sends {r, r, r}
      std::vector<std::int32_t> send(n, r), recv(n * p, -1), inplace(n * p, -1);
      c.all_gather(send.data(), recv.data(), n, DType::i32);
      std::fill_n(inplace.begin() + r * n, n, r);
      c.all_gather(inplace.data() + r * n, inplace.data(), n, DType::i32);
      for (int s = 0; s < p; ++s)
        for (std::size_t i = 0; i < n; ++i) good &= recv[s * n + i] == s && inplace[s * n + i] == s;
      // reduce_scatter: element j of rank s's buffer is s + j; rank r gets Σ_s (s + r·n + i)
      std::vector<std::int32_t> full(n * p), mine(n);
      for (std::size_t j = 0; j < n * p; ++j) full[j] = r + static_cast<std::int32_t>(j);
      c.reduce_scatter(full.data(), mine.data(), n, DType::i32, ReduceOp::sum);
      for (std::size_t i = 0; i < n; ++i)
        good &= mine[i] == p * (p - 1) / 2 + p * static_cast<std::int32_t>(r * n + i);
      // all_to_all: rank r sends 100·r + s to rank s
      std::vector<std::int32_t> out(p), in(p);
      for (int s = 0; s < p; ++s) out[s] = 100 * r + s;
      c.all_to_all(out.data(), in.data(), 1, DType::i32);
      for (int s = 0; s < p; ++s) good &= in[s] == 100 * s + r;
      // broadcast from the last rank
      std::vector<double> b(4, r);
      c.broadcast(b.data(), 4, DType::f64, p - 1);
      for (double x : b) good &= x == p - 1;
      ok[r] = good;
    });
    CHECK(std::accumulate(ok.begin(), ok.end(), 0) == p);
  }
}

TEST_CASE("ThreadComm send/recv around a ring") {
  const int p = 4;
  std::vector<double> got(p, -1);
  run_ranks(p, [&](ThreadComm& c) {
    const int r = c.rank();
    double mine = 10.0 * r, theirs = -1;
    c.send(&mine, 1, DType::f64, (r + 1) % p);
    c.recv(&theirs, 1, DType::f64, (r + p - 1) % p);
    got[r] = theirs;
  });
  for (int r = 0; r < p; ++r) CHECK(got[r] == 10.0 * ((r + p - 1) % p));
}

TEST_CASE("a failing rank aborts the world and its own exception reaches the caller") {
  std::atomic<int> aborted{0};
  CHECK_THROWS_WITH_AS(run_ranks(4,
                                 [&](ThreadComm& c) {
                                   if (c.rank() == 2) throw ShapeError("rank 2 saw a bad shape");
                                   try {
                                     double x = 1;
                                     c.all_reduce(&x, 1, DType::f64, ReduceOp::sum);  // never completes
                                   } catch (const CommError&) {
                                     ++aborted;
                                     throw;
                                   }
                                 }),
                       "rank 2 saw a bad shape", ShapeError);
  CHECK(aborted == 3);
}

TEST_CASE("SelfComm: the group of one") {
  SelfComm s;
  double x[3] = {1, 2, 3}, y[3] = {};
  s.all_reduce(x, 3, DType::f64, ReduceOp::sum);
  s.all_gather(x, y, 3, DType::f64);
  CHECK(y[2] == 3);
  CHECK_THROWS_WITH_AS(s.send(x, 1, DType::f64, 1), "SelfComm: no peer rank 1 in a group of size 1", CommError);
  // The whole algebra runs on it: a product is the dense product.
  const auto A = testing::random_int<double>(3, 4, 1), B = testing::random_int<double>(4, 2, 2);
  Group g = SelfComm{};
  auto c = all_reduce(matmul(shard<ColSharded>(A, g), shard<RowSharded>(B, g)));
  CHECK(compare(c, testing::Mat<double>(A * B)).max_abs == 0.0);
}

TEST_CASE("replicas_agree detects a diverged replica") {
  auto res = testing::per_rank<int>(3, [](Group g) {
    auto x = shard<Replicated>(testing::random_int<double>(2, 2, 3), g);
    const bool before = replicas_agree(x);
    if (g.rank() == 1) x.local()(0, 0) += 1;
    const bool after = replicas_agree(x);
    return int(before) * 10 + int(after);
  });
  for (int v : res) CHECK(v == 10);
}
