// tests/support/fuzz_programs.hpp — random programs of sharded operations, each step checked
// bit for bit against an independent dense Eigen computation (issue 14). Shared by the property
// test tests/unit/test_fuzz_programs.cpp (a fixed number of programs in the normal suite) and the
// fuzz driver tests/fuzz/fuzz_programs.cpp (runs for N seconds from a seed).
//
// A program is (element type, world size P, a start layout and shape, a sequence of ops). Its ops:
//   redistribute<To>, matmul (local, operands and transposed views in every valid rule),
//   matmul<To> (planned, a transposed left operand too), add, hadamard, scale, all_reduce,
//   all_gather, reduce_scatter<Row|C>, split<Row|C>, all_to_all<C|Row>, to_partial.
// Each op with a second operand makes it fresh (a seeded integer matrix in a random valid layout,
// Partial ones as per-rank summands); the dense model applies the same op to dense matrices that
// never went through a collective. Operands are small integers, and growth is capped (a
// product or hadamard is drawn only while max |X| ≤ 2^20, 2^12 for float), so every value is
// exact and the check is bitwise (up to the sign of a zero: −0 and +0 compare equal).
//
// Every rank draws the same program from the same seed (so all ranks run the same collectives);
// an exception ends the ThreadComm world (run_ranks rethrows it); a mismatch is returned.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "testing.hpp"

namespace fuzz {

using namespace shardalg;
using testing::Mat;
using K = LayoutKind;

template <class T>
using Var = std::variant<Sharded<T, Replicated>, Sharded<T, RowSharded>, Sharded<T, ColSharded>, Sharded<T, Partial>>;

using testing::with_bool;
using testing::with_layout;
inline const char* kind_name(K k) {
  switch (k) {
    case K::row: return "Row";
    case K::col: return "C";
    case K::partial: return "Partial";
    default: return "R";
  }
}
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
  else return "i64";
}

/// A program's verdict: ok, or the first mismatch; `trace` lists the ops run.
struct Outcome {
  bool ok = true;
  int steps = 0;
  std::string trace, what;
};

/// Same bits, but −0 == +0 (the sign of an exact zero depends on the order of its terms).
template <class T>
bool same_bits(const Mat<T>& got, const Mat<T>& want, std::string& where) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) {
    where = detail::cat("shape ", got.rows(), "x", got.cols(), " vs dense ", want.rows(), "x", want.cols());
    return false;
  }
  for (Index j = 0; j < got.cols(); ++j)
    for (Index i = 0; i < got.rows(); ++i) {
      const T a = got(i, j), b = want(i, j);
      if constexpr (std::is_floating_point_v<T>)
        if (a == T(0) && b == T(0)) continue;
      if (std::memcmp(&a, &b, sizeof(T)) != 0) {
        where = detail::cat("element (", i, ",", j, "): ", a, " vs dense ", b);
        return false;
      }
    }
  return true;
}

template <class T>
class Program {
 public:
  static constexpr double kLimit = std::is_same_v<T, float> ? 4096.0 : 1048576.0;

  Program(Group g, std::uint64_t seed, int max_steps) : g_(std::move(g)), p_(g_.size()), gen_(seed), max_steps_(max_steps) {}

  Outcome run() {
    Outcome out;
    const K k0 = kind(uni(0, 3));
    const Index r = dim(), c = dim();
    const auto s = fresh();
    x_ = with_layout(k0, [&]<class L>(L) { return Var<T>(testing::make_operand<L, T>(g_, r, c, s)); });
    X_ = with_layout(k0, [&]<class L>(L) { return testing::dense_of<L, T>(r, c, s, p_); });
    log_ << "P=" << p_ << " " << type_name<T>() << " " << r << "x" << c << "[" << kind_name(k0) << "]";
    if (!check(out)) return out;
    const int steps = uni(1, max_steps_);
    for (int i = 0; i < steps; ++i) {
      step();
      ++out.steps;
      if (!check(out)) return out;
    }
    out.trace = log_.str();
    return out;
  }

 private:
  Group g_;
  int p_;
  std::mt19937_64 gen_;
  int max_steps_;
  Var<T> x_;
  Mat<T> X_;
  std::ostringstream log_;

  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  static K kind(int i) { return i == 0 ? K::replicated : i == 1 ? K::row : i == 2 ? K::col : K::partial; }
  Index dim() { return static_cast<Index>(p_) * uni(1, 3); }
  std::uint64_t fresh() { return gen_() >> 8; }
  K xkind() const { return kind(static_cast<int>(x_.index())); }
  Index rows() const { return X_.rows(); }
  Index cols() const { return X_.cols(); }
  bool small() const {
    return X_.size() == 0 || static_cast<double>(X_.template cast<double>().cwiseAbs().maxCoeff()) <= kLimit;
  }

  bool check(Outcome& out) {
    const Mat<T> got = std::visit([](const auto& x) { return Mat<T>(to_dense(x)); }, x_);
    std::string where;
    if (same_bits<T>(got, X_, where)) return true;
    out.ok = false;
    out.what = where;
    out.trace = log_.str();
    return false;
  }
  void note(const std::string& op) { log_ << " | " << op << " → " << rows() << "x" << cols() << "[" << kind_name(xkind()) << "]"; }

  template <class F>
  void apply(F&& f) {
    Var<T> next = std::visit(f, x_);
    x_ = std::move(next);
  }

  void step() {
    const K k = xkind();
    // The ops valid on the current layout (growth ops only while the values are small).
    std::vector<int> ops = {0, 3, 12};  // redistribute, add, to_partial/redistribute<Partial>
    if (small()) ops.insert(ops.end(), {1, 1, 2, 2, 4, 5});
    if (k == K::partial) ops.insert(ops.end(), {6, 8});
    if (k == K::row || k == K::col) ops.insert(ops.end(), {7, 10});
    if (k == K::replicated) ops.push_back(9);
    const int op = ops[static_cast<std::size_t>(uni(0, static_cast<int>(ops.size()) - 1))];
    switch (op) {
      case 0: {
        const K to = kind(uni(0, 3));
        apply([&](const auto& x) { return with_layout(to, [&]<class To>(To) { return Var<T>(redistribute<To>(x)); }); });
        note(std::string("redistribute<") + kind_name(to) + ">");
        break;
      }
      case 1: matmul_local(); break;
      case 2: matmul_to(); break;
      case 3: {  // add a fresh operand of the same layout
        const auto s = fresh();
        const Index r = rows(), c = cols();
        apply([&](const auto& x) {
          using L = typename std::remove_cvref_t<decltype(x)>::layout;
          return Var<T>(x + testing::make_operand<L, T>(g_, r, c, s));
        });
        with_layout(k, [&]<class L>(L) { X_ += testing::dense_of<L, T>(r, c, s, p_); });
        note("add");
        break;
      }
      case 4: {  // hadamard with a fresh operand (R beside a Partial, else the same layout)
        const auto s = fresh();
        const Index r = rows(), c = cols();
        const K kb = k == K::partial ? K::replicated : k;
        apply([&](const auto& x) {
          using L = typename std::remove_cvref_t<decltype(x)>::layout;
          using LB = std::conditional_t<std::is_same_v<L, Partial>, Replicated, L>;
          return Var<T>(hadamard(x, testing::make_operand<LB, T>(g_, r, c, s)));
        });
        with_layout(kb, [&]<class L>(L) { X_ = X_.cwiseProduct(testing::dense_of<L, T>(r, c, s, p_)); });
        note(std::string("hadamard(·, ") + kind_name(kb) + ")");
        break;
      }
      case 5: {
        static constexpr int alphas[] = {-3, -2, -1, 2, 3};
        const T alpha = static_cast<T>(alphas[uni(0, 4)]);
        apply([&](const auto& x) { return Var<T>(x * alpha); });
        X_ *= alpha;
        note(detail::cat("scale ", alpha));
        break;
      }
      case 6:
        apply([&](const auto& x) -> Var<T> {
          if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(x)>::layout, Partial>) return all_reduce(x);
          else throw std::logic_error("fuzz: all_reduce drawn on a non-Partial");
        });
        note("all_reduce");
        break;
      case 7:
        apply([&](const auto& x) -> Var<T> {
          using L = typename std::remove_cvref_t<decltype(x)>::layout;
          if constexpr (std::is_same_v<L, RowSharded> || std::is_same_v<L, ColSharded>) return all_gather(x);
          else throw std::logic_error("fuzz: all_gather drawn on R or Partial");
        });
        note("all_gather");
        break;
      case 8: {
        const bool row = uni(0, 1) == 1;
        apply([&](const auto& x) -> Var<T> {
          if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(x)>::layout, Partial>) {
            if (row) return reduce_scatter<RowSharded>(x);
            return reduce_scatter<ColSharded>(x);
          } else {
            throw std::logic_error("fuzz: reduce_scatter drawn on a non-Partial");
          }
        });
        note(row ? "reduce_scatter<Row>" : "reduce_scatter<C>");
        break;
      }
      case 9: {
        const bool row = uni(0, 1) == 1;
        apply([&](const auto& x) -> Var<T> {
          if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(x)>::layout, Replicated>) {
            if (row) return split<RowSharded>(x);
            return split<ColSharded>(x);
          } else {
            throw std::logic_error("fuzz: split drawn on a non-R");
          }
        });
        note(row ? "split<Row>" : "split<C>");
        break;
      }
      case 10:
        apply([&](const auto& x) -> Var<T> {
          using L = typename std::remove_cvref_t<decltype(x)>::layout;
          if constexpr (std::is_same_v<L, RowSharded>) return all_to_all<ColSharded>(x);
          else if constexpr (std::is_same_v<L, ColSharded>) return all_to_all<RowSharded>(x);
          else throw std::logic_error("fuzz: all_to_all drawn on R or Partial");
        });
        note("all_to_all");
        break;
      default:
        if (k == K::replicated) {
          apply([&](const auto& x) -> Var<T> {
            if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(x)>::layout, Replicated>)
              return to_partial(x);
            else throw std::logic_error("fuzz: unreachable");
          });
          note("to_partial");
        } else {
          apply([&](const auto& x) { return Var<T>(redistribute<Partial>(x)); });
          note("redistribute<Partial>");
        }
    }
  }

  /// x (or xᵀ) · B (or Bᵀ), B fresh, in a layout pair the rule table accepts; no collective.
  void matmul_local() {
    const K kx = xkind();
    bool ta = false, tb = false;
    K kb = K::replicated;
    for (;;) {
      ta = uni(0, 1) == 1;
      tb = uni(0, 1) == 1;
      kb = kind(uni(0, 3));
      if (matmul_rule(ta ? transpose(kx) : kx, tb ? transpose(kb) : kb).valid) break;
    }
    product(ta, tb, kb, nullptr);
  }
  /// matmul<To>(x or xᵀ, B): the planner picks the collectives.
  void matmul_to() {
    const bool ta = uni(0, 1) == 1;
    const K kb = kind(uni(0, 3)), to = kind(uni(0, 3));
    product(ta, false, kb, &to);
  }

  // A function template, not a nested generic lambda: Clang 14 instantiates the discarded
  // branches of an `if constexpr` whose condition depends on an enclosing lambda's parameters.
  template <bool TA, bool TB, class SX, class LB>
  static Var<T> local_product(const Sharded<T, SX>& x, const Sharded<T, LB>& b) {
    constexpr K ea = TA ? transpose(SX::kind) : SX::kind;
    constexpr K eb = TB ? transpose(LB::kind) : LB::kind;
    if constexpr (!matmul_rule(ea, eb).valid) {
      throw std::logic_error("fuzz: an invalid product was drawn");
    } else if constexpr (TA && TB) {
      return matmul(transpose(x), transpose(b));
    } else if constexpr (TA) {
      return matmul(transpose(x), b);
    } else if constexpr (TB) {
      return matmul(x, transpose(b));
    } else {
      return matmul(x, b);
    }
  }

  void product(bool ta, bool tb, K kb, const K* to) {
    const Index k = ta ? rows() : cols(), m = ta ? cols() : rows(), n = dim();
    const Index br = tb ? n : k, bc = tb ? k : n;
    const auto s = fresh();
    const Mat<T> B = with_layout(kb, [&]<class L>(L) { return testing::dense_of<L, T>(br, bc, s, p_); });
    apply([&](const auto& x) -> Var<T> {
      return with_layout(kb, [&]<class LB>(LB) -> Var<T> {
        const auto b = testing::make_operand<LB, T>(g_, br, bc, s);
        return with_bool(ta, [&]<class TA>(TA) -> Var<T> {
          if (to) {
            return with_layout(*to, [&]<class To>(To) -> Var<T> {
              if constexpr (TA::value) return matmul<To>(transpose(x), b);
              else return matmul<To>(x, b);
            });
          }
          return with_bool(tb, [&]<class TB>(TB) -> Var<T> { return local_product<TA::value, TB::value>(x, b); });
        });
      });
    });
    const Mat<T> A = ta ? Mat<T>(X_.transpose()) : X_;
    X_ = A * (tb ? Mat<T>(B.transpose()) : B);
    (void)m;
    note(detail::cat(to ? "matmul<" : "matmul", to ? kind_name(*to) : "", to ? ">(" : "(", ta ? "xᵀ, " : "x, ",
                     tb ? "Bᵀ[" : "B[", kind_name(kb), "] ", br, "x", bc, ")"));
  }
};

/// SplitMix64: program i of a run seeded `seed` at world size p gets seed_of(seed, p, i).
inline std::uint64_t seed_of(std::uint64_t seed, int p, std::uint64_t i) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (i + 1) + static_cast<std::uint64_t>(p) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Program `pseed` on this rank's group in element type T.
template <class T>
Outcome run_typed(const Group& g, std::uint64_t pseed, int max_steps) {
  return Program<T>(g, pseed, max_steps).run();
}

// FUZZ_TYPES_COMPILED_APART: each type's programs are compiled in a TU of their own
// (tests/unit/fuzz_types_*.cpp, for the property test: the four in one TU took 1.1 GB of compiler
// memory); without it, here.
#if defined(FUZZ_TYPES_COMPILED_APART)
extern template Outcome run_typed<double>(const Group&, std::uint64_t, int);
extern template Outcome run_typed<float>(const Group&, std::uint64_t, int);
extern template Outcome run_typed<std::int32_t>(const Group&, std::uint64_t, int);
extern template Outcome run_typed<std::int64_t>(const Group&, std::uint64_t, int);
#endif

/// Program `pseed` on this rank's group, in the element type its seed picks (f64, f32, i32, i64).
inline Outcome run_program(const Group& g, std::uint64_t pseed, int max_steps) {
  switch (pseed % 4) {
    case 0: return run_typed<double>(g, pseed, max_steps);
    case 1: return run_typed<float>(g, pseed, max_steps);
    case 2: return run_typed<std::int32_t>(g, pseed, max_steps);
    default: return run_typed<std::int64_t>(g, pseed, max_steps);
  }
}

/// What a batch of programs found.
struct Finding {
  int p = 0;
  std::uint64_t pseed = 0;
  std::string trace, what;
};
struct BatchResult {
  long programs = 0, steps = 0;
  std::vector<Finding> findings;
};

/// Programs first, first + 1, …, first + count − 1 of (seed, p) on one ThreadComm world of p
/// ranks (rank 0's verdicts; every rank computes the same). An exception ends the world: it is
/// recorded as a finding for the program in flight, and the batch resumes after it.
inline BatchResult run_batch(int p, std::uint64_t seed, std::uint64_t first, long count, int max_steps) {
  BatchResult res;
  std::uint64_t next = first;
  const std::uint64_t end = first + static_cast<std::uint64_t>(count);
  while (next < end) {
    std::uint64_t in_flight = next;
    try {
      run_ranks(p, [&](ThreadComm& comm) {
        const Group g = comm;
        for (std::uint64_t i = next; i < end; ++i) {
          if (comm.rank() == 0) in_flight = i;
          const auto pseed = seed_of(seed, p, i);
          const Outcome o = run_program(g, pseed, max_steps);
          if (comm.rank() == 0) {
            ++res.programs;
            res.steps += o.steps;
            if (!o.ok) res.findings.push_back({p, pseed, o.trace, o.what});
          }
        }
      });
      next = end;
    } catch (const std::exception& e) {
      res.findings.push_back({p, seed_of(seed, p, in_flight), "(exception)", e.what()});
      ++res.programs;
      next = in_flight + 1;
    }
  }
  return res;
}

}  // namespace fuzz
