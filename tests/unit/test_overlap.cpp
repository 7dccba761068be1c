// The overlapped column-parallel backward on thread ranks and one rank. ThreadComm reduces with
// the ranks' own threads, so Group::iall_reduce falls back to the blocking all-reduce: the
// overlap schedule must still be exact, and Overlap::automatic must settle on sequential at once.
// The asynchronous path itself runs in tests/mpi/test_mpi_overlap.cpp.
#include <doctest/doctest.h>

#include "../mpi/overlap_cases.hpp"

using namespace shardalg;
using ov::Overlap;

namespace {
template <class Fn>
std::vector<ov::Result> on_threads(int p, Fn fn) {
  return testing::per_rank<ov::Result>(p, [&](Group g) { return fn(g); });
}
void check_exact(const ov::Result& r) {
  for (const auto& e : r.errors) {
    const auto& name = e.first;  // a plain name: Clang 14 cannot capture a structured binding
    const auto& err = e.second;
    CAPTURE(name);
    CHECK(err == 0.0);
  }
}
}  // namespace

TEST_CASE("iall_reduce without an asynchronous backend: completed at once, recorded once") {
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    for (const auto& r : on_threads(p, [](Group g) { return ov::raw_iall_reduce(g, 1001); })) {
      check_exact(r);
      CHECK(r.all_reduces == 1);
      CHECK(r.all_reduce_elements == 1001);
      CHECK_FALSE(r.async);
    }
  }
  CHECK_FALSE(Group(SelfComm{}).async_all_reduce());
}

TEST_CASE_TEMPLATE("overlapped ColumnParallelLinear backward equals the dense gradients exactly", T, float, double) {
  for (int p : {1, 2, 3, 4}) {
    for (int chunks : {1, 3, 4, 7, 40}) {  // 40 > m: one-token chunks and empty tails
      CAPTURE(p);
      CAPTURE(chunks);
      for (const auto& r : on_threads(p, [&](Group g) { return ov::column_linear<T>(g, {Overlap::on, chunks}, 2); })) {
        check_exact(r);
        CHECK(r.all_reduces == 2u);  // one per backward, P = 1 included
        CHECK(r.all_reduce_elements == 2u * 20 * 12);
      }
    }
  }
}

TEST_CASE("Overlap::automatic on thread ranks: sequential at once, no calibration traffic") {
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    for (const auto& r : on_threads(p, [](Group g) { return ov::column_linear<double>(g, {Overlap::automatic, 4}, 9); })) {
      check_exact(r);
      REQUIRE(r.chosen.has_value());
      CHECK_FALSE(*r.chosen);
      CHECK(r.all_reduces == 9);
    }
  }
}

TEST_CASE("MLP and block with overlap on equal the sequential schedule") {
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    // dX: the blocking fallback reduces the same summands in the same order, so it is exact;
    // dW1 is summed in token chunks, a different order: a few ulps of its size.
    for (const auto& r : on_threads(p, ov::mlp)) {
      CHECK(r.errors.at(0).second == 0.0);
      CHECK(r.errors.at(1).second <= 1e-13);
    }
    for (const auto& r : on_threads(p, ov::block)) check_exact(r);
  }
}

TEST_CASE("set_overlap rejects a chunk count below one") {
  run_ranks(1, [](ThreadComm& c) {
    auto col = nn::ColumnParallelLinear<float>::from_dense(testing::Mat<double>(testing::Mat<double>::Ones(4, 4)), static_cast<const testing::Mat<double>*>(nullptr), Group(c));
    CHECK_THROWS_WITH_AS(col.set_overlap({Overlap::on, 0}), "ColumnParallelLinear: overlap chunks 0 must be at least 1",
                         ShapeError);
    CHECK(col.overlap().mode == Overlap::off);  // unchanged
  });
}

TEST_CASE("Gpt::set_overlap: the loss and every gradient equal the sequential schedule's") {
  nn::GptConfig c;
  c.vocab = 50;
  c.hidden = 16;
  c.heads = 4;
  c.layers = 2;
  c.seq = 6;
  c.batch = 2;
  c.vocab_divisor = 1;
  std::vector<std::int64_t> tokens(12), targets(12);
  for (int i = 0; i < 12; ++i) tokens[i] = (7 * i + 3) % 50, targets[i] = (11 * i + 5) % 50;
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    const auto errs = testing::per_rank<std::vector<double>>(p, [&](Group g) {
      auto model = nn::Gpt<double>::init(c, g);
      const double l0 = model.forward_backward(tokens, targets);
      const auto g0 = model.grad_masters();
      model.set_overlap({Overlap::on, 3});
      for (const auto& b : model.blocks()) {  // it reached every column-parallel layer
        if (b.attention().qkv().overlap().mode != Overlap::on || b.mlp().fc1().overlap().mode != Overlap::on)
          return std::vector<double>{1.0};
      }
      const double l1 = model.forward_backward(tokens, targets);
      const auto g1 = model.grad_masters();
      std::vector<double> out{std::abs(l1 - l0)};
      for (const auto& [name, m] : g0) out.push_back((g1.at(name) - m).cwiseAbs().maxCoeff());
      return out;
    });
    for (const auto& rank : errs) {
      CHECK(rank.size() > 10);               // the loss and every parameter's gradient
      CHECK(rank.front() == 0.0);            // the forward is untouched
      for (double e : rank) CHECK(e <= 1e-13);  // dW summed in token chunks: a different order
    }
  }
}
