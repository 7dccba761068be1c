// 05 — Which tensor-parallel degrees a head count admits, and the error for one that it does not.
//
// Each rank must own whole attention heads (a head's softmax needs all of its query·key
// dimensions), so P must divide the number of heads.
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

int main() {
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

  std::printf("\n32 heads at TP = 6: 32 / 6 = %.2f heads per rank\n", 32.0 / 6.0);
  std::string message;
  try {
    cost::check_tp_degree(32, 6);
  } catch (const shardalg::DivisibilityError& e) {
    message = e.what();
  }
  std::printf("  error: %s\n", message.c_str());
  example::check(message == "heads 32 is not divisible by tensor-parallel size 6", "the one-line error names both values");
  std::printf("  Fixes: a divisor of 32 (TP 4 or 8), or grouped-query attention whose KV-group count P divides.\n");
  return example::finish("05_tp_degrees");
}
