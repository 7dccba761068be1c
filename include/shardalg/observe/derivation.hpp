// shardalg/observe/derivation.hpp — a derivation as executed: each operation's layouts read from the
// C++ types of its operands and result, each collective from the ledger entries it caused.
//
// Re-run a layer operation by operation, and after each one record what it was:
//
//   verify::ExplainLog ex(ledger);
//   auto k = ex.mark();                                   // the ledger's length now
//   auto y = matmul(a, w);
//   ex.op(k, verify::layout_name("A", a) + " · " + verify::layout_name("W", w) + " → " +
//            verify::layout_name("Y", y));                // "A[R] · W[C] → Y[C]", no comm
//   k = ex.mark();
//   auto z = reduce_from(std::move(zp));
//   ex.redist(k, "Z[Partial]", "g", verify::layout_name("Z", z));   // "Z[Partial] → g: all_reduce → Z[R]"
//   ex.plan<Replicated>(o, wo, "O", "Wo", "Z");           // what matmul<R>(O, Wo) would plan
//
// The collectives of a step are the ledger entries recorded since its mark, so a listing made
// this way cannot claim a collective that did not run. plan() sets, beside the last step, the
// plan matmul<To> (plan/matmul.hpp) makes for the product just traced, and whether its
// communicating steps are the collectives the step ran. A transposed operand is written with ᵀ
// and the layout of the transpose: Wᵀ for W[C] is Wᵀ[Row].
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardalg/observe/ledger.hpp"
#include "shardalg/base/layout.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/plan/matmul.hpp"
#include "shardalg/plan/plan.hpp"

namespace shardalg::verify {

/// The layout notation of a tensor type: Sharded<T, ColSharded> → "C"; Transposed → its transpose's.
template <class X>
struct LayoutOf;
template <class T, class L, class B>
struct LayoutOf<Sharded<T, L, B>> {
  static constexpr std::string_view value = L::notation;
  static constexpr bool transposed = false;
};
template <class T, class L, class B>
struct LayoutOf<Transposed<T, L, B>> {
  static constexpr std::string_view value = notation(transpose(L::kind));
  static constexpr bool transposed = true;
};

/// "name[layout]" for a tensor, "nameᵀ[layout of the transpose]" for a transposed one.
template <class X>
[[nodiscard]] std::string layout_name(const std::string& name, const X&) {
  using LO = LayoutOf<std::remove_cvref_t<X>>;
  return name + (LO::transposed ? "ᵀ" : "") + "[" + std::string(LO::value) + "]";
}

/// One listed operation.
struct ExplainStep {
  std::string op;                    // "A[R] · W[C] → Y[C]"
  std::string note;
  std::vector<LedgerEntry> comm;     // what it communicated, from the ledger
  std::optional<std::string> plan;   // "matmul<R>(O, Wo) plans …", when plan() was asked
  bool plan_agrees = false;          // the plan's collectives are the ones `comm` holds
};

/// The forward and backward listing of one layer, read against its ledger.
class ExplainLog {
 public:
  explicit ExplainLog(Ledger& ledger) : ledger_(&ledger) {}
  ExplainLog(const ExplainLog&) = delete;
  ExplainLog& operator=(const ExplainLog&) = delete;

  std::vector<ExplainStep> forward, backward;

  /// Steps go to the forward listing (the default) or the backward one.
  void to_forward() { cur_ = &forward; }
  void to_backward() { cur_ = &backward; }

  /// The ledger's length now: the collectives of the next step are the entries after it.
  [[nodiscard]] std::size_t mark() const { return ledger_->entries().size(); }
  [[nodiscard]] std::vector<LedgerEntry> since(std::size_t k0) const {
    const auto& es = ledger_->entries();
    return {es.begin() + static_cast<std::ptrdiff_t>(std::min(k0, es.size())), es.end()};
  }

  /// A local operation (or one whose collectives the ledger names).
  void op(std::size_t k0, std::string text, std::string note = {}) { push(std::move(text), std::move(note), since(k0)); }
  /// A redistribution "in → label: <collectives, or identity> → out".
  void redist(std::size_t k0, const std::string& in, const std::string& label, const std::string& out, std::string note = {}) {
    auto c = since(k0);
    std::string mid;
    for (const auto& e : c) mid += (mid.empty() ? "" : " + ") + std::string(to_string(e.kind));
    if (mid.empty()) mid = "identity";
    push(in + " → " + label + ": " + mid + " → " + out, std::move(note), std::move(c));
  }
  /// A step whose collectives were recorded elsewhere (e.g. inside a layer's private code).
  void push(std::string text, std::string note, std::vector<LedgerEntry> comm) {
    cur_->push_back({std::move(text), std::move(note), std::move(comm), std::nullopt, false});
  }

  /// Beside the last step: the plan matmul<To> would insert for a · b, and whether its
  /// communicating steps are the collectives the last step ran (in order, by kind).
  template <class To, class A, class Bop>
  void plan(const A& a, const Bop& b, const std::string& na, const std::string& nb, const std::string& nz) {
    const plan::MatmulPlan pl = matmul_plan<To>(a, b);
    std::vector<std::string> planned;
    for (const plan::Chain* c : {&pl.pre_a, &pl.pre_b, &pl.post})
      for (int i = 0; i < c->steps; ++i)
        if (plan::communicates(c->step(i))) planned.emplace_back(plan::to_string(c->step(i)));
    std::vector<std::string> ran;
    for (const auto& e : cur_->back().comm) ran.emplace_back(to_string(e.kind));
    cur_->back().plan = "matmul<" + std::string(To::notation) + ">(" + na + ", " + nb + ") plans " + plan::describe(pl, na, nb, nz);
    cur_->back().plan_agrees = planned == ran;
  }

 private:
  Ledger* ledger_;
  std::vector<ExplainStep>* cur_ = &forward;
};

/// "kind layout_in->layout_out elements" for each entry a predicate selects: two runs made the
/// same collectives when their signatures are equal.
template <class Pred>
[[nodiscard]] std::vector<std::string> collective_signatures(const std::vector<LedgerEntry>& entries, Pred&& pred) {
  std::vector<std::string> out;
  for (const auto& e : entries)
    if (pred(e))
      out.push_back(std::string(to_string(e.kind)) + " " + e.layout_in + "->" + e.layout_out + " " + std::to_string(e.elements));
  return out;
}

}  // namespace shardalg::verify
