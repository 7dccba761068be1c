// Redistributions as laws. For each one, over world sizes 1, 2, 3, 4, 8 and element types:
//   forward:  to_dense(op(x)) == dense(x), bit for bit (a redistribution never changes the value)
//   adjoint:  ⟨op(x), y⟩ == ⟨x, adjoint(y)⟩ with the pairing of a value and its cotangent taken on
//             the local blocks (testing::local_pairing), summed over ranks on the test thread
//   ledger:   exactly one entry of the right kind, element count, bytes and layouts
#include <doctest/doctest.h>

#include <numeric>

#include "testing.hpp"

using namespace shardalg;
using testing::Mat;

namespace {

struct Outcome {
  double forward_err = -1;   // max |to_dense(op(x)) − X|
  double lhs = 0, rhs = 0;   // this rank's share of ⟨op(x), y⟩ and ⟨x, adjoint(y)⟩
  std::vector<LedgerEntry> fwd, bwd;  // ledger entries of the forward op and of the adjoint
};

double sum_lhs(const std::vector<Outcome>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0, [](double s, const Outcome& o) { return s + o.lhs; });
}
double sum_rhs(const std::vector<Outcome>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0, [](double s, const Outcome& o) { return s + o.rhs; });
}

// Run `body(group, ledger) -> Outcome` on p ranks with a ledgered group.
template <class Body>
std::vector<Outcome> on_ranks(int p, Body body) {
  std::vector<Outcome> out(p);
  run_ranks(p, [&](ThreadComm& comm) {
    Ledger ledger;
    out[comm.rank()] = body(ledgered(comm, ledger), ledger);
  });
  return out;
}

void check_entry(const LedgerEntry& e, CollectiveKind kind, std::size_t elements, std::size_t elem_bytes,
                 std::string_view in, std::string_view out) {
  CHECK(e.kind == kind);
  CHECK(e.elements == elements);
  CHECK(e.bytes == elements * elem_bytes);
  CHECK(e.layout_in == in);
  CHECK(e.layout_out == out);
}

template <class T>
void check_law(const std::vector<Outcome>& res) {
  for (const auto& o : res) CHECK(o.forward_err == 0.0);
  CHECK(sum_lhs(res) == sum_rhs(res));  // integer-valued operands: exact
}

}  // namespace

TEST_CASE_TEMPLATE("all_reduce: Partial -> R; adjoint identity", T, float, double, std::int64_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 3, c = 2 * p + 1;  // Partial and R need no divisibility
    const Mat<T> X = testing::partial_dense<T>(r, c, 5, p);
    const Mat<T> Y = testing::random_int<T>(r, c, 6);
    auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
      Outcome o;
      auto x = testing::make_operand<Partial, T>(g, r, c, 5);
      auto y = shard<Replicated>(Y, g);  // the cotangent of an R output
      auto z = all_reduce(x);
      o.fwd = ledger.entries();
      o.forward_err = compare(z, X).max_abs;
      o.lhs = testing::local_pairing(z, y);
      ledger.clear();
      o.rhs = testing::local_pairing(x, adjoint::all_reduce(y));
      o.bwd = ledger.entries();
      return o;
    });
    check_law<T>(res);
    for (const auto& o : res) {
      REQUIRE(o.fwd.size() == 1);
      check_entry(o.fwd[0], CollectiveKind::all_reduce, r * c, sizeof(T), "Partial", "R");
      CHECK(o.bwd.empty());
    }
  }
}

TEST_CASE_TEMPLATE("reduce_scatter: Partial -> Row or C; adjoint all_gather", T, float, double, std::int32_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 3 * p;
    const Mat<T> X = testing::partial_dense<T>(r, c, 7, p);
    for (bool rows : {true, false}) {
      CAPTURE(rows);
      auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
        Outcome o;
        auto x = testing::make_operand<Partial, T>(g, r, c, 7);
        auto run = [&]<class To>(To) {
          auto y = shard<To>(testing::random_int<T>(r, c, 8), g);  // cotangent of a To output
          auto z = reduce_scatter<To>(x);
          o.fwd = ledger.entries();
          o.forward_err = compare(z, X).max_abs;
          o.lhs = testing::local_pairing(z, y);
          ledger.clear();
          o.rhs = testing::local_pairing(x, adjoint::reduce_scatter(y));
          o.bwd = ledger.entries();
        };
        if (rows) run(RowSharded{});
        else run(ColSharded{});
        return o;
      });
      check_law<T>(res);
      for (const auto& o : res) {
        REQUIRE(o.fwd.size() == 1);
        REQUIRE(o.bwd.size() == 1);
        check_entry(o.fwd[0], CollectiveKind::reduce_scatter, r * c, sizeof(T), "Partial", rows ? "Row" : "C");
        check_entry(o.bwd[0], CollectiveKind::all_gather, r * c, sizeof(T), rows ? "Row" : "C", "R");
      }
    }
  }
}

TEST_CASE_TEMPLATE("all_gather: Row or C -> R; adjoint reduce_scatter (Partial cotangent) or split (R)", T, float,
                   double, std::int64_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 3 * p, c = 2 * p;
    const Mat<T> X = testing::random_int<T>(r, c, 9);
    for (bool rows : {true, false})
      for (bool partial_cot : {true, false}) {
        CAPTURE(rows);
        CAPTURE(partial_cot);
        auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
          Outcome o;
          auto run = [&]<class From>(From) {
            auto x = shard<From>(X, g);
            auto z = all_gather(x);
            o.fwd = ledger.entries();
            o.forward_err = compare(z, X).max_abs;
            ledger.clear();
            if (partial_cot) {
              auto y = testing::make_operand<Partial, T>(g, r, c, 10);
              o.lhs = testing::local_pairing(z, y);
              o.rhs = testing::local_pairing(x, adjoint::all_gather<From>(y));
            } else {
              auto y = shard<Replicated>(testing::random_int<T>(r, c, 10), g);
              o.lhs = testing::local_pairing(z, y);
              o.rhs = testing::local_pairing(x, adjoint::all_gather<From>(y));
            }
            o.bwd = ledger.entries();
          };
          if (rows) run(RowSharded{});
          else run(ColSharded{});
          return o;
        });
        check_law<T>(res);
        for (const auto& o : res) {
          REQUIRE(o.fwd.size() == 1);
          check_entry(o.fwd[0], CollectiveKind::all_gather, r * c, sizeof(T), rows ? "Row" : "C", "R");
          if (partial_cot) {
            REQUIRE(o.bwd.size() == 1);
            check_entry(o.bwd[0], CollectiveKind::reduce_scatter, r * c, sizeof(T), "Partial", rows ? "Row" : "C");
          } else {
            CHECK(o.bwd.empty());  // split is free
          }
        }
      }
  }
}

TEST_CASE_TEMPLATE("split: R -> Row or C, no communication; adjoint all_gather", T, float, double) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 4 * p;
    const Mat<T> X = testing::random_int<T>(r, c, 11);
    for (bool rows : {true, false}) {
      auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
        Outcome o;
        auto run = [&]<class To>(To) {
          auto x = shard<Replicated>(X, g);
          auto y = shard<To>(testing::random_int<T>(r, c, 12), g);
          auto z = split<To>(x);
          o.fwd = ledger.entries();
          o.forward_err = compare(z, X).max_abs;
          o.lhs = testing::local_pairing(z, y);
          o.rhs = testing::local_pairing(x, adjoint::split(y));
          o.bwd = ledger.entries();
        };
        if (rows) run(RowSharded{});
        else run(ColSharded{});
        return o;
      });
      check_law<T>(res);
      for (const auto& o : res) {
        CHECK(o.fwd.empty());
        REQUIRE(o.bwd.size() == 1);
        check_entry(o.bwd[0], CollectiveKind::all_gather, r * c, sizeof(T), rows ? "Row" : "C", "R");
      }
    }
  }
}

TEST_CASE_TEMPLATE("all_to_all: Row <-> C; adjoint all_to_all back", T, float, double, std::int32_t) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 2 * p, c = 3 * p;
    const Mat<T> X = testing::random_int<T>(r, c, 13);
    for (bool row_to_col : {true, false}) {
      CAPTURE(row_to_col);
      auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
        Outcome o;
        auto run = [&]<class From, class To>(From, To) {
          auto x = shard<From>(X, g);
          auto y = shard<To>(testing::random_int<T>(r, c, 14), g);
          auto z = all_to_all<To>(x);
          o.fwd = ledger.entries();
          o.forward_err = compare(z, X).max_abs;
          o.lhs = testing::local_pairing(z, y);
          ledger.clear();
          o.rhs = testing::local_pairing(x, adjoint::all_to_all<From>(y));
          o.bwd = ledger.entries();
        };
        if (row_to_col) run(RowSharded{}, ColSharded{});
        else run(ColSharded{}, RowSharded{});
        return o;
      });
      check_law<T>(res);
      for (const auto& o : res) {
        REQUIRE(o.fwd.size() == 1);
        REQUIRE(o.bwd.size() == 1);
        check_entry(o.fwd[0], CollectiveKind::all_to_all, r * c, sizeof(T), row_to_col ? "Row" : "C",
                    row_to_col ? "C" : "Row");
        check_entry(o.bwd[0], CollectiveKind::all_to_all, r * c, sizeof(T), row_to_col ? "C" : "Row",
                    row_to_col ? "Row" : "C");
      }
    }
  }
}

TEST_CASE_TEMPLATE("f = copy_to and g = reduce_from are conjugate", T, float, double) {
  for (int p : testing::world_sizes) {
    CAPTURE(p);
    const Index r = 4, c = 5;
    const Mat<T> X = testing::random_int<T>(r, c, 15);
    // f: R -> R, identity forward; its cotangent is Partial, reduced backward.
    auto f = on_ranks(p, [&](Group g, Ledger& ledger) {
      Outcome o;
      auto x = shard<Replicated>(X, g);
      auto z = copy_to(x);
      o.fwd = ledger.entries();
      o.forward_err = compare(z, X).max_abs;
      auto y = testing::make_operand<Partial, T>(g, r, c, 16);
      o.lhs = testing::local_pairing(z, y);
      o.rhs = testing::local_pairing(x, adjoint::copy_to(y));
      o.bwd = ledger.entries();
      return o;
    });
    check_law<T>(f);
    for (const auto& o : f) {
      CHECK(o.fwd.empty());
      REQUIRE(o.bwd.size() == 1);
      check_entry(o.bwd[0], CollectiveKind::all_reduce, r * c, sizeof(T), "Partial", "R");
    }
    // g: Partial -> R, all-reduce forward; identity backward.
    const Mat<T> Z = testing::partial_dense<T>(r, c, 17, p);
    auto gr = on_ranks(p, [&](Group g, Ledger& ledger) {
      Outcome o;
      auto x = testing::make_operand<Partial, T>(g, r, c, 17);
      auto z = reduce_from(x);
      o.fwd = ledger.entries();
      o.forward_err = compare(z, Z).max_abs;
      auto y = shard<Replicated>(testing::random_int<T>(r, c, 18), g);
      ledger.clear();
      o.lhs = testing::local_pairing(z, y);
      o.rhs = testing::local_pairing(x, adjoint::reduce_from(y));
      o.bwd = ledger.entries();
      return o;
    });
    check_law<T>(gr);
    for (const auto& o : gr) {
      REQUIRE(o.fwd.size() == 1);
      check_entry(o.fwd[0], CollectiveKind::all_reduce, r * c, sizeof(T), "Partial", "R");
      CHECK(o.bwd.empty());
    }
  }
}

TEST_CASE("a wrong adjoint breaks the pairing law (the law can fail)") {
  // all_gather's adjoint for a Partial cotangent is reduce_scatter. Splitting the cotangent
  // instead (the adjoint for an R cotangent) drops the other ranks' summands.
  const int p = 3;
  const Index r = 6, c = 3;
  const Mat<double> X = testing::random_int<double>(r, c, 19);
  auto res = on_ranks(p, [&](Group g, Ledger&) {
    Outcome o;
    auto x = shard<RowSharded>(X, g);
    auto y = testing::make_operand<Partial, double>(g, r, c, 20);
    o.lhs = testing::local_pairing(all_gather(x), y);
    // Wrong: treat the Partial summand as if it were the replicated cotangent.
    auto wrong = split<RowSharded>(Sharded<double, Replicated>(y.local(), r, c, g));
    o.rhs = testing::local_pairing(x, wrong);
    return o;
  });
  CHECK(sum_lhs(res) != sum_rhs(res));
}

TEST_CASE_TEMPLATE("shard<Partial>: rank 0 holds the matrix, the others zero; the sum is exact", T, float, double,
                   std::int32_t) {
  for (int p : testing::world_sizes) {
    const Mat<T> X = testing::random_int<T>(3, 5, 22);
    auto res = testing::per_rank<double>(p, [&](Group g) {
      auto x = shard<Partial>(X, g);
      const bool zero_elsewhere = g.rank() == 0 ? x.local() == X : x.local().isZero();
      return zero_elsewhere ? compare(x, X).max_abs : -1.0;
    });
    for (double e : res) CHECK(e == 0.0);
  }
}

TEST_CASE("ledger scopes nest and select") {
  const int p = 2;
  auto res = on_ranks(p, [&](Group g, Ledger& ledger) {
    Outcome o;
    auto x = testing::make_operand<Partial, double>(g, 4, 4, 21);
    {
      auto s = ledger.scope("block0");
      {
        auto t = ledger.scope("mlp.fwd");
        auto z = all_reduce(x);
        auto w = reduce_scatter<RowSharded>(x);
        (void)z;
        (void)w;
      }
      auto v = all_reduce(x);
      (void)v;
    }
    auto dense = to_dense(x);  // verification traffic: not recorded
    (void)dense;
    o.fwd = ledger.entries();
    o.lhs = static_cast<double>(ledger.count(CollectiveKind::all_reduce, "block0/mlp.fwd"));
    o.rhs = static_cast<double>(ledger.count(CollectiveKind::all_reduce, "block0"));
    o.forward_err = static_cast<double>(ledger.count("block0/mlp") + ledger.count("block0/mlp.fwd/x"));
    return o;
  });
  for (const auto& o : res) {
    REQUIRE(o.fwd.size() == 3);
    CHECK(o.fwd[0].scope == "block0/mlp.fwd");
    CHECK(o.fwd[2].scope == "block0");
    CHECK(o.lhs == 1.0);
    CHECK(o.rhs == 2.0);
    CHECK(o.forward_err == 0.0);  // "block0/mlp" is not a prefix scope of "block0/mlp.fwd"
  }
}
