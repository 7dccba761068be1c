// tests/layers/tp_cases.hpp — the thread-world layer tests' shared checks, shared by test_layers.cpp,
// test_layers_dropout_ledger.cpp and test_layers_init_errors.cpp; the cases themselves are compiled
// once, in test_layers_{double,float}.cpp (case_instances.hpp).
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "case_instances.hpp"

namespace lt {

inline const std::vector<int> kWorlds = {1, 2, 3, 4};

/// The largest error seen per element type, printed once at the end (for the record).
inline std::map<std::string, std::pair<double, std::string>>& worst() {
  static std::map<std::string, std::pair<double, std::string>> w;
  return w;
}

template <class T, class Fn>
void expect_all(int p, Fn fn) {
  const auto results = testing::per_rank<Checks>(p, [&](const Group& g) { return fn(g); });
  auto& w = worst()[std::is_same_v<T, double> ? "double" : "float"];
  for (int r = 0; r < p; ++r)
    for (const auto& c : results[r]) {
      CHECK_MESSAGE(c.err.within(tol<T>), c.name << " p=" << p << " rank=" << r << ": " << c.err);
      if (c.err.max_rel >= w.first) w = {c.err.max_rel, c.name + " p=" + std::to_string(p)};
    }
  CHECK(!results[0].empty());
}

}  // namespace lt
