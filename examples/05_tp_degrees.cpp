// 05 — Which tensor-parallel degrees a head count admits, and the error for one that it does not.
//
// Each rank must own whole attention heads (a head's softmax needs all of its query·key
// dimensions), so P must divide the number of heads.
//
//   05_tp_degrees [--heads 32] [--tp 6]      (the head count and degree of the error's example; the
//                                             three models' rows are their published head counts)
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

static std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

int main(int argc, char** argv) {
  int heads = 32, tp = 6;
  example::Flags("05_tp_degrees", argc, argv, {{"heads", &heads}, {"tp", &tp}});
  std::printf("Valid tensor-parallel degrees: the divisors of the head count\n\n");
  struct Case { const char* model; int heads; std::vector<int> expected; };
  const Case cases[] = {
      {"GPT-3 175B", 96, {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96}},
      {"Llama 2 70B", 64, {1, 2, 4, 8, 16, 32, 64}},
      {"Llama 2 7B", 32, {1, 2, 4, 8, 16, 32}},
  };
  for (const auto& c : cases) {
    const auto got = cost::valid_tp_degrees(c.heads);
    std::printf("  %-12s %3d heads: TP in { %s }\n", c.model, c.heads, list(got).c_str());
    example::check(got == c.expected, std::to_string(c.heads) + " heads: the list matches the hand list");
  }
  std::printf("\n  The source chapter's (seed 001) GPT-3 row stops at 48 while its other rows end at the head\n"
              "  count: 96 (one head per rank) is valid too, if rarely useful.\n");

  // The divisors of the head count by trial division, the hand list for any --heads:
  std::vector<int> divisors;
  for (int p = 1; p <= heads; ++p)
    if (heads % p == 0) divisors.push_back(p);
  const bool divides = heads % tp == 0;
  std::printf("\n%d heads at TP = %d: %d / %d = %.2f heads per rank\n", heads, tp, heads, tp, double(heads) / tp);
  std::string message;
  try {
    cost::check_tp_degree(heads, tp);
  } catch (const shardalg::DivisibilityError& e) {
    message = e.what();
  }
  if (divides) {
    std::printf("  no error: TP %d divides %d (valid degrees { %s })\n", tp, heads, list(divisors).c_str());
    example::check(message.empty(), "a divisor of the head count is accepted");
    example::check(cost::valid_tp_degrees(heads) == divisors, std::to_string(heads) + " heads: the list matches trial division");
  } else {
    std::printf("  error: %s\n", message.c_str());
    example::check(message == "heads " + std::to_string(heads) + " is not divisible by tensor-parallel size " + std::to_string(tp),
                   "the one-line error names both values");
    // The nearest valid degrees on either side of the one asked for:
    int below = 1, above = heads;
    for (int p : divisors) {
      if (p < tp) below = p;
      if (p > tp && above == heads && p < above) above = p;
    }
    std::string fixes = tp > heads ? "TP " + std::to_string(heads) + " or less" : "TP " + std::to_string(below) + " or " + std::to_string(above);
    std::printf("  Fixes: a divisor of %d (%s), or grouped-query attention whose KV-group count P divides.\n", heads,
                fixes.c_str());
  }
  return example::finish("05_tp_degrees");
}
