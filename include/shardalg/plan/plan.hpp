// shardalg/plan/plan.hpp — plans: which collectives turn one layout into another, and which
// collectives around a local GEMM give a requested result layout. A plan is a constexpr value;
// `redistribute<To>` and `matmul<To>` (plan/redistribute.hpp, plan/matmul.hpp) execute one.
//
// Steps. Every ordered pair of distinct layouts has one direct step:
//
//   from \ to   R                 Row                      C                        Partial
//   R           —                 split (free)             split (free)             to_partial (free)
//   Row         all_gather        —                        all_to_all               to_partial (free)
//   C           all_gather        all_to_all               —                        to_partial (free)
//   Partial     all_reduce        reduce_scatter           reduce_scatter           —
//
// to_partial keeps the value where it is and zeros the rest: R → Partial leaves it on rank 0,
// Row/C → Partial puts each rank's block into a zero matrix of the global shape. Exact, no
// communication, but a full-shape buffer per rank.
//
// A chain is 0, 1 or 2 steps (from → [via →] to). Its cost is the α-β model of cost/ summed
// over its communicating steps (free steps cost 0).
//
// Matmul plans. C[m,n] = op(A)[m,k] · op(B)[k,n] requested as layout To: a chain on A to A′, a
// chain on B to B′, the local GEMM of the rule table (A′ · B′ → Z, base/rules.hpp), a chain
// Z → To. The *set* of candidates is fixed at compile time: every (A′, B′) whose rule is valid,
// with every chain of ≤ 2 steps on each side. The *pick* uses the run-time shapes: the cheapest
// by  seconds = Σ chain costs + 2·m′·k′·n′ / flops_per_second  (the slowest rank's local GEMM),
// ties broken by fewer communicating steps, then fewer steps, then a fixed order — so every rank
// (same shapes, same model) picks the same plan. Every layout holds every shape (the balanced
// blocks of base/blocks.hpp); where a split dimension does not divide, a step and the GEMM are
// priced at the largest block, ⌈n/p⌉, the one the slowest rank holds.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/layout.hpp"
#include "shardalg/base/rules.hpp"
#include "shardalg/cost/alpha_beta.hpp"

namespace shardalg {

namespace plan {

enum class StepKind { split, all_gather, all_to_all, all_reduce, reduce_scatter, to_partial };

constexpr std::string_view to_string(StepKind s) {
  switch (s) {
    case StepKind::split: return "split";
    case StepKind::all_gather: return "all_gather";
    case StepKind::all_to_all: return "all_to_all";
    case StepKind::all_reduce: return "all_reduce";
    case StepKind::reduce_scatter: return "reduce_scatter";
    case StepKind::to_partial: return "to_partial";
  }
  return "?";
}

/// Whether a step moves data between ranks (and so appears in the ledger).
constexpr bool communicates(StepKind s) { return s != StepKind::split && s != StepKind::to_partial; }

/// The direct step from → to (from ≠ to): the table above.
constexpr StepKind step_between(LayoutKind from, LayoutKind to) {
  using K = LayoutKind;
  if (to == K::partial) return StepKind::to_partial;
  switch (from) {
    case K::replicated: return StepKind::split;
    case K::row:
    case K::col: return to == K::replicated ? StepKind::all_gather : StepKind::all_to_all;
    case K::partial: return to == K::replicated ? StepKind::all_reduce : StepKind::reduce_scatter;
    case K::invariant: break;  // not a planner layout (redistribute / matmul<To> refuse it: E151, E170)
  }
  return StepKind::split;
}

/// The cost model a plan is chosen by. Every rank must use the same one (the pick must agree).
/// The defaults are this project's 2-core reference machine with ThreadComm (README: α ≈ 0.6 µs,
/// β ≈ 21 GB/s; about 100 GFLOP/s of single-core sgemm); pass a calibrated one for your system.
struct Model {
  cost::AlphaBeta link{1e-6, 2e10};
  double flops_per_second = 1e11;
};

/// The extent a dimension of n costs as on p ranks when split: p·⌈n/p⌉ (n when p divides it).
constexpr double split_extent(Index n, int p) { return static_cast<double>(p) * static_cast<double>((n + p - 1) / p); }

/// Seconds of one step from → to on a rows × cols matrix of `elem_bytes` elements on p ranks; a
/// split dimension that does not divide is priced at its largest block.
constexpr double step_seconds(StepKind s, LayoutKind from, LayoutKind to, Index rows, Index cols, int p,
                              std::size_t elem_bytes, const Model& m) {
  const bool rows_split = from == LayoutKind::row || to == LayoutKind::row;
  const bool cols_split = from == LayoutKind::col || to == LayoutKind::col;
  const double v = (rows_split ? split_extent(rows, p) : static_cast<double>(rows)) *
                   (cols_split ? split_extent(cols, p) : static_cast<double>(cols)) * static_cast<double>(elem_bytes);
  switch (s) {
    case StepKind::all_gather: return cost::all_gather_seconds(m.link, v, p);
    case StepKind::all_to_all: return cost::all_to_all_seconds(m.link, v, p);
    case StepKind::all_reduce: return cost::all_reduce_seconds(m.link, v, p);
    case StepKind::reduce_scatter: return cost::reduce_scatter_seconds(m.link, v, p);
    case StepKind::split:
    case StepKind::to_partial: return 0.0;
  }
  return 0.0;
}

/// Whether a rows × cols matrix can be held in layout k on p ranks: always, for a shape with no
/// negative dimension (a split that does not divide gives blocks of ⌊n/p⌋ and ⌈n/p⌉).
constexpr bool holds(LayoutKind, Index rows, Index cols, int p) { return rows >= 0 && cols >= 0 && p >= 1; }

// ---------------------------------------------------------------------------------------------
// Chains
// ---------------------------------------------------------------------------------------------

/// from → at[1] → … → at[steps]; steps ∈ {0, 1, 2}.
struct Chain {
  std::array<LayoutKind, 3> at{};
  int steps = 0;

  [[nodiscard]] constexpr LayoutKind from() const { return at[0]; }
  [[nodiscard]] constexpr LayoutKind to() const { return at[static_cast<std::size_t>(steps)]; }
  [[nodiscard]] constexpr StepKind step(int i) const {
    return step_between(at[static_cast<std::size_t>(i)], at[static_cast<std::size_t>(i) + 1]);
  }
  [[nodiscard]] constexpr int collectives() const {
    int n = 0;
    for (int i = 0; i < steps; ++i) n += communicates(step(i)) ? 1 : 0;
    return n;
  }
  [[nodiscard]] constexpr double seconds(Index rows, Index cols, int p, std::size_t eb, const Model& m) const {
    double s = 0;
    for (int i = 0; i < steps; ++i)
      s += step_seconds(step(i), at[static_cast<std::size_t>(i)], at[static_cast<std::size_t>(i) + 1], rows, cols, p,
                        eb, m);
    return s;
  }
  [[nodiscard]] constexpr bool feasible(Index rows, Index cols, int p) const {
    for (int i = 0; i <= steps; ++i)
      if (!holds(at[static_cast<std::size_t>(i)], rows, cols, p)) return false;
    return true;
  }
};

inline constexpr std::array<LayoutKind, 4> all_layouts{LayoutKind::replicated, LayoutKind::row, LayoutKind::col,
                                                       LayoutKind::partial};

/// Every chain from → to of ≤ 2 steps that visits no layout twice: the identity when from = to,
/// else the direct step and the two routes through another layout. `n` of them are used.
struct Chains {
  std::array<Chain, 3> items{};
  int n = 0;
};
constexpr Chains chains(LayoutKind from, LayoutKind to) {
  Chains out;
  if (from == to) {
    out.items[0] = Chain{{from, from, from}, 0};
    out.n = 1;
    return out;
  }
  out.items[out.n++] = Chain{{from, to, to}, 1};
  for (LayoutKind via : all_layouts)
    if (via != from && via != to) out.items[out.n++] = Chain{{from, via, to}, 2};
  return out;
}

/// (seconds, collectives, steps) in that order of precedence; strict `<` keeps the first found.
struct Score {
  double seconds = std::numeric_limits<double>::infinity();
  int collectives = 0;
  int steps = 0;
  constexpr bool operator<(const Score& o) const {
    if (seconds != o.seconds) return seconds < o.seconds;
    if (collectives != o.collectives) return collectives < o.collectives;
    return steps < o.steps;
  }
};

/// The chain redistribute<To> runs, with its modelled cost.
struct RedistributePlan {
  Chain chain;
  Score score;
  bool feasible = false;
};

constexpr RedistributePlan choose_redistribute(LayoutKind from, LayoutKind to, Index rows, Index cols, int p,
                                               std::size_t elem_bytes, const Model& m = {}) {
  RedistributePlan best;
  const Chains cs = chains(from, to);
  for (int i = 0; i < cs.n; ++i) {
    const Chain& c = cs.items[static_cast<std::size_t>(i)];
    if (!c.feasible(rows, cols, p)) continue;
    const Score s{c.seconds(rows, cols, p, elem_bytes, m), c.collectives(), c.steps};
    if (!best.feasible || s < best.score) best = {c, s, true};
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Matmul plans
// ---------------------------------------------------------------------------------------------

/// One candidate local product A′ · B′ → Z (a valid entry of the rule table).
struct LocalProduct {
  LayoutKind a, b, z;
  LocalForm form;
};

/// The candidate local products, fixed at compile time: every valid entry of the rule table.
struct LocalProducts {
  std::array<LocalProduct, 16> items{};
  int n = 0;
};
constexpr LocalProducts local_products() {
  LocalProducts out;
  for (LayoutKind a : all_layouts)
    for (LayoutKind b : all_layouts) {
      const MatmulRule r = matmul_rule(a, b);
      if (r.valid) out.items[out.n++] = {a, b, r.result, r.form};
    }
  return out;
}

/// Local GEMM dimensions of A′[m,k] · B′[k,n] on p ranks: the largest block's, ⌈·/p⌉ (the
/// slowest rank's GEMM).
constexpr double local_flops(const LocalProduct& lp, Index m, Index k, Index n, int p) {
  const auto largest = [p](Index d) { return static_cast<double>((d + p - 1) / p); };
  const double lm = lp.a == LayoutKind::row ? largest(m) : static_cast<double>(m);
  const double ln = lp.b == LayoutKind::col ? largest(n) : static_cast<double>(n);
  const bool k_split = lp.a == LayoutKind::col || lp.b == LayoutKind::row;
  const double lk = k_split ? largest(k) : static_cast<double>(k);
  return 2.0 * lm * lk * ln;
}

/// A matmul<To> plan: chains on the operands, the local product, the chain on the result.
struct MatmulPlan {
  Chain pre_a, pre_b;
  LocalProduct product{};
  Chain post;
  Score score;
  bool feasible = false;

  [[nodiscard]] constexpr int collectives() const {
    return pre_a.collectives() + pre_b.collectives() + post.collectives();
  }
};

/// The cheapest plan for op(A)[m,k] (layout a) · op(B)[k,n] (layout b) → layout `to`.
constexpr MatmulPlan choose_matmul(LayoutKind a, LayoutKind b, LayoutKind to, Index m, Index k, Index n, int p,
                                   std::size_t elem_bytes, const Model& model = {}) {
  MatmulPlan best;
  const LocalProducts lps = local_products();
  for (int i = 0; i < lps.n; ++i) {
    const LocalProduct lp = lps.items[static_cast<std::size_t>(i)];
    if (!holds(lp.z, m, n, p)) continue;
    const RedistributePlan ca = choose_redistribute(a, lp.a, m, k, p, elem_bytes, model);
    const RedistributePlan cb = choose_redistribute(b, lp.b, k, n, p, elem_bytes, model);
    const RedistributePlan cz = choose_redistribute(lp.z, to, m, n, p, elem_bytes, model);
    if (!ca.feasible || !cb.feasible || !cz.feasible) continue;
    const Score s{ca.score.seconds + cb.score.seconds + cz.score.seconds +
                      local_flops(lp, m, k, n, p) / model.flops_per_second,
                  ca.score.collectives + cb.score.collectives + cz.score.collectives,
                  ca.score.steps + cb.score.steps + cz.score.steps};
    if (!best.feasible || s < best.score) best = {ca.chain, cb.chain, lp, cz.chain, s, true};
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Printing, in layout notation
// ---------------------------------------------------------------------------------------------

inline std::string describe(const Chain& c, std::string_view name) {
  std::string out;
  for (int i = 0; i < c.steps; ++i) {
    if (!out.empty()) out += "; ";
    out += std::string(to_string(c.step(i))) + " " + std::string(name) + "[" +
           std::string(notation(c.at[static_cast<std::size_t>(i)])) + "] → " + std::string(name) + "[" +
           std::string(notation(c.at[static_cast<std::size_t>(i) + 1])) + "]";
  }
  return out;
}

/// e.g. "X[C]·W[Row] → Z[Partial]; all_reduce Z[Partial] → Z[R]".
inline std::string describe(const MatmulPlan& p, std::string_view a = "A", std::string_view b = "B",
                            std::string_view c = "C") {
  std::string out;
  for (const std::string& s : {describe(p.pre_a, a), describe(p.pre_b, b)})
    if (!s.empty()) out += s + "; ";
  out += std::string(a) + "[" + std::string(notation(p.product.a)) + "]·" + std::string(b) + "[" +
         std::string(notation(p.product.b)) + "] → " + std::string(c) + "[" + std::string(notation(p.product.z)) + "]";
  const std::string post = describe(p.post, c);
  if (!post.empty()) out += "; " + post;
  return out;
}

}  // namespace plan
}  // namespace shardalg
