// Shapes that do not divide by P: the balanced blocks (base/blocks.hpp), every redistribution and
// matmul<To> as laws at P = 1, 2, 3, 5, 8 on threads (tests/unit/uneven_cases.hpp; the same cases
// run under mpirun -np 3 in tests/mpi/test_mpi_uneven.cpp), and the reductions that must divide by
// the global count.
#include <doctest/doctest.h>

#include <mutex>

#include "testing.hpp"
#include "uneven_cases.hpp"

using namespace shardalg;
using testing::Mat;

namespace {
inline const std::vector<int> uneven_worlds = {1, 2, 3, 5, 8};

template <class T>
void run_laws(int p) {
  std::mutex m;
  std::vector<std::string> fails;
  run_ranks(p, [&](ThreadComm& comm) {
    Group g = comm;
    auto sum = [&](double v) {
      g.all_reduce(&v, 1, ReduceOp::sum, CallInfo{"-", "-", true});
      return v;
    };
    auto f = uneven_cases::run<T>(g, sum);
    std::lock_guard lock(m);
    fails.insert(fails.end(), f.begin(), f.end());
  });
  for (const auto& f : fails) FAIL_CHECK(f);
  CHECK(fails.empty());
}
}  // namespace

TEST_CASE("the split rule: balanced blocks, sizes differing by at most one, contiguous in rank order") {
  for (int p : {1, 2, 3, 4, 5, 7, 8})
    for (Index n = 0; n <= 3 * p + 2; ++n) {
      Index next = 0, largest = 0, smallest = n;
      for (int r = 0; r < p; ++r) {
        const BlockExtent b = block_of(n, p, r);
        CHECK(b == BlockExtent{uneven_cases::dealt_block(n, p, r).first, uneven_cases::dealt_block(n, p, r).second});
        CHECK(b.offset == next);
        next += b.size;
        largest = std::max(largest, b.size);
        smallest = std::min(smallest, b.size);
      }
      CHECK(next == n);
      CHECK(largest - smallest <= 1);
      CHECK(largest == (n + p - 1) / p);
    }
  // The worked examples of base/blocks.hpp, and torch.chunk's rule beside them.
  CHECK(block_sizes(10, 4) == std::vector<Index>{3, 3, 2, 2});
  CHECK(block_sizes(3, 5) == std::vector<Index>{1, 1, 1, 0, 0});
  CHECK(block_sizes(8, 4) == std::vector<Index>{2, 2, 2, 2});
  CHECK(chunk_block(10, 4, 3) == BlockExtent{9, 1});
  CHECK(chunk_block(5, 4, 3) == BlockExtent{5, 0});
  CHECK(chunk_block(5, 4, 2) == BlockExtent{4, 1});
}

TEST_CASE_TEMPLATE("uneven shapes: every redistribution and matmul<To> equal dense, adjoint laws, ledger counts", T,
                   double, float, std::int64_t) {
  for (int p : uneven_worlds) {
    CAPTURE(p);
    run_laws<T>(p);
  }
}

TEST_CASE("mean over uneven shards divides by the global count (PyTorch DTensor #162692)") {
  // 5 rows on 2 ranks: blocks of 3 and 2. The mean of the local means ((m0 + m1)/2) is wrong; the
  // global sum over the global count is right.
  const Mat<double> X = testing::random_int<double>(5, 3, 21);
  const double dense_mean = X.sum() / double(X.size());
  for (int p : {2, 3, 4, 8}) {
    CAPTURE(p);
    run_ranks(p, [&](ThreadComm& comm) {
      Group g = comm;
      const auto x = shard<RowSharded>(X, g);
      const auto s = sum(x);  // s[R]: Σ of every element, all-reduced
      CHECK(s.local()(0, 0) / double(x.rows() * x.cols()) == doctest::Approx(dense_mean).epsilon(1e-15));
      // The wrong recipe differs here (a mutation of the normaliser): the mean of per-rank means.
      double local_mean = x.local_rows() == 0 ? 0.0 : x.local().sum() / double(x.local().size());
      g.all_reduce(&local_mean, 1, ReduceOp::sum, CallInfo{"-", "-", true});
      CHECK(std::abs(local_mean / p - dense_mean) > 1e-3);
    });
  }
}

TEST_CASE("visualize names each rank's uneven block") {
  CHECK(visualize(LayoutKind::row, 5, 3, 2) ==
        "5x3 RowSharded on 2 ranks (uneven: 3x3 down to 2x3)\n  rank 0: rows 0..2, cols 0..2\n  rank 1: rows 3..4, cols 0..2\n");
  CHECK(visualize(LayoutKind::col, 2, 2, 3) ==
        "2x2 ColSharded on 3 ranks (uneven: 2x1 down to 2x0)\n  rank 0: rows 0..1, cols 0..0\n"
        "  rank 1: rows 0..1, cols 1..1\n  rank 2: rows 0..1, cols none\n");
}
