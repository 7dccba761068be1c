// Property test: random (operation, layouts, transposes, shapes, world size, element type)
// cases, each checked exactly against the dense reference (integer-valued operands). Every rank
// draws the same sequence of cases from one seed, so all ranks run the same collectives.
#include <doctest/doctest.h>

#include <random>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {

using K = LayoutKind;

using testing::with_bool;
using testing::with_layout;

struct Case {
  int op;            // 0 matmul, 1 redistribution, 2 elementwise
  K a, b;            // stored layouts
  bool ta, tb;       // transposed operands (matmul)
  int which;         // which redistribution / elementwise op
  Index m, k, n;     // shapes (multiples of P where they must split)
  std::uint64_t seed;
};

// Draw a case whose layouts make a valid operation (invalid ones are compile errors, tested
// separately in tests/compile_fail).
Case draw(std::mt19937_64& gen, int p) {
  std::uniform_int_distribution<int> layout(0, 3), dim(1, 4), op(0, 2), coin(0, 1), which(0, 7);
  for (;;) {
    Case c{op(gen), K(layout(gen)), K(layout(gen)), coin(gen) == 1, coin(gen) == 1, which(gen),
           p * dim(gen), p * dim(gen), p * dim(gen), gen()};
    if (c.op == 0) {
      const K ea = c.ta ? transpose(c.a) : c.a, eb = c.tb ? transpose(c.b) : c.b;
      if (matmul_rule(ea, eb).valid) return c;
    } else {
      return c;
    }
  }
}

template <class T, class SA, class SB, bool TA, bool TB>
double run_matmul(Group g, const Case& c, int p) {
  constexpr K ea = TA ? transpose(SA::kind) : SA::kind, eb = TB ? transpose(SB::kind) : SB::kind;
  if constexpr (!matmul_rule(ea, eb).valid) {
    return -1;  // never drawn
  } else {
    const Index ar = TA ? c.k : c.m, ac = TA ? c.m : c.k, br = TB ? c.n : c.k, bc = TB ? c.k : c.n;
    const Mat<T> A = testing::dense_of<SA, T>(ar, ac, c.seed, p), B = testing::dense_of<SB, T>(br, bc, c.seed + 1, p);
    const Mat<T> expected = (TA ? Mat<T>(A.transpose()) : A) * (TB ? Mat<T>(B.transpose()) : B);
    auto a = testing::make_operand<SA, T>(g, ar, ac, c.seed);
    auto b = testing::make_operand<SB, T>(g, br, bc, c.seed + 1);
    if constexpr (TA && TB) return compare(matmul(transpose(a), transpose(b)), expected).max_abs;
    else if constexpr (TA) return compare(matmul(transpose(a), b), expected).max_abs;
    else if constexpr (TB) return compare(matmul(a, transpose(b)), expected).max_abs;
    else return compare(matmul(a, b), expected).max_abs;
  }
}

template <class T>
double run_redistribution(Group g, const Case& c, int p) {
  const Index r = c.m, n = c.n;
  switch (c.which % 8) {
    case 0: {
      auto x = testing::make_operand<Partial, T>(g, r, n, c.seed);
      return compare(all_reduce(x), testing::dense_of<Partial, T>(r, n, c.seed, p)).max_abs;
    }
    case 1:
    case 2: {
      auto x = testing::make_operand<Partial, T>(g, r, n, c.seed);
      const Mat<T> X = testing::dense_of<Partial, T>(r, n, c.seed, p);
      return c.which % 8 == 1 ? compare(reduce_scatter<RowSharded>(x), X).max_abs
                              : compare(reduce_scatter<ColSharded>(x), X).max_abs;
    }
    case 3: return compare(all_gather(shard<RowSharded>(testing::random_int<T>(r, n, c.seed), g)),
                           testing::random_int<T>(r, n, c.seed)).max_abs;
    case 4: return compare(all_gather(shard<ColSharded>(testing::random_int<T>(r, n, c.seed), g)),
                           testing::random_int<T>(r, n, c.seed)).max_abs;
    case 5: return compare(split<ColSharded>(shard<Replicated>(testing::random_int<T>(r, n, c.seed), g)),
                           testing::random_int<T>(r, n, c.seed)).max_abs;
    case 6: return compare(all_to_all<ColSharded>(shard<RowSharded>(testing::random_int<T>(r, n, c.seed), g)),
                           testing::random_int<T>(r, n, c.seed)).max_abs;
    default: return compare(all_to_all<RowSharded>(shard<ColSharded>(testing::random_int<T>(r, n, c.seed), g)),
                            testing::random_int<T>(r, n, c.seed)).max_abs;
  }
}

template <class T, class L>
double run_elementwise(Group g, const Case& c, int p) {
  const Index r = c.m, n = c.n;
  const Mat<T> A = testing::dense_of<L, T>(r, n, c.seed, p), B = testing::dense_of<L, T>(r, n, c.seed + 1, p);
  auto a = testing::make_operand<L, T>(g, r, n, c.seed);
  auto b = testing::make_operand<L, T>(g, r, n, c.seed + 1);
  switch (c.which % 4) {
    case 0: return compare(a + b, Mat<T>(A + B)).max_abs;
    case 1: return compare(col_sum(a), Mat<T>(A.colwise().sum())).max_abs;
    case 2: return compare(row_sum(a), Mat<T>(A.rowwise().sum())).max_abs;
    default: {
      const Mat<T> Rm = testing::random_int<T>(r, n, c.seed + 2);
      if constexpr (std::is_same_v<L, Partial>)
        return compare(hadamard(a, shard<Replicated>(Rm, g)), Mat<T>(A.cwiseProduct(Rm))).max_abs;
      else
        return compare(hadamard(a, shard<L>(Rm, g)), Mat<T>(A.cwiseProduct(Rm))).max_abs;
    }
  }
}

template <class T>
double run_case(Group g, const Case& c, int p) {
  if (c.op == 0)
    return with_layout(c.a, [&]<class SA>(SA) {
      return with_layout(c.b, [&]<class SB>(SB) {
        return with_bool(c.ta, [&]<class TA>(TA) {
          return with_bool(c.tb, [&]<class TB>(TB) { return run_matmul<T, SA, SB, TA::value, TB::value>(g, c, p); });
        });
      });
    });
  if (c.op == 1) return run_redistribution<T>(g, c, p);
  return with_layout(c.a, [&]<class L>(L) { return run_elementwise<T, L>(g, c, p); });
}

}  // namespace

TEST_CASE("property: 2,100 random cases over layouts, shapes, world sizes and element types") {
  constexpr int cases_per_world = 420;
  int total = 0, failed = 0;
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    std::vector<std::vector<double>> errors(p);
    run_ranks(p, [&](ThreadComm& comm) {
      std::mt19937_64 gen(20261121 + p);  // the same sequence on every rank
      auto& mine = errors[comm.rank()];
      for (int i = 0; i < cases_per_world; ++i) {
        const Case c = draw(gen, p);
        const Group g = comm;
        mine.push_back(i % 2 == 0 ? run_case<double>(g, c, p) : run_case<std::int32_t>(g, c, p));
      }
    });
    for (int r = 0; r < p; ++r)
      for (double e : errors[r]) failed += (e != 0.0);
    total += cases_per_world;
  }
  CHECK(total >= 2000);
  CHECK(failed == 0);
}
