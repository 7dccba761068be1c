// tests/fuzz/fuzz_programs.cpp — the random-program fuzz driver (issue 14): runs the generator
// of tests/support/fuzz_programs.hpp for a given time from a seed, over world sizes 1, 2, 3, 4
// and 8, and prints what it ran and every finding with the seed that replays it. Not a CTest
// test (it runs for as long as asked); build the target `fuzz_programs` and run it:
//
//   fuzz_programs [--seconds N] [--seed S] [--max-steps M]     fuzz (default 60 s, seed 1, 8 steps)
//   fuzz_programs --p P --replay PSEED [--max-steps M]         run one program, print its trace
//
// Exit status: 0 with no findings, 1 with any.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "fuzz_programs.hpp"
#include "shardalg/base/checks.hpp"

int main(int argc, char** argv) {
  double seconds = 60;
  std::uint64_t seed = 1, replay = 0;
  int max_steps = 8, replay_p = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--max-steps") max_steps = std::atoi(argv[i + 1]);
    else if (a == "--p") replay_p = std::atoi(argv[i + 1]);
    else if (a == "--replay") replay = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  shardalg::set_check_replicas(true);
  if (replay_p > 0) {
    fuzz::Outcome o;
    shardalg::run_ranks(replay_p, [&](shardalg::ThreadComm& c) {
      auto r = fuzz::run_program(shardalg::Group(c), replay, max_steps);
      if (c.rank() == 0) o = r;
    });
    std::cout << o.trace << "\n" << (o.ok ? "ok" : "MISMATCH: " + o.what) << "\n";
    return o.ok ? 0 : 1;
  }

  const int sizes[] = {1, 2, 3, 4, 8};
  const long batch = 200;
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  long programs = 0, steps = 0;
  std::map<int, long> per_p;
  std::vector<fuzz::Finding> findings;
  for (std::uint64_t round = 0; elapsed() < seconds; ++round)
    for (int p : sizes) {
      if (elapsed() >= seconds) break;
      const auto res = fuzz::run_batch(p, seed, round * batch, batch, max_steps);
      programs += res.programs;
      steps += res.steps;
      per_p[p] += res.programs;
      for (const auto& f : res.findings) {
        findings.push_back(f);
        std::cout << "FINDING: P=" << f.p << " --replay " << f.pseed << ": " << f.what << "\n  " << f.trace << std::endl;
      }
    }
  std::cout << "fuzz_programs: seed " << seed << ", " << elapsed() << " s, " << programs << " programs (";
  for (const auto& [p, n] : per_p) std::cout << "P=" << p << ": " << n << " ";
  std::cout << "), " << steps << " steps, " << findings.size() << " findings\n";
  return findings.empty() ? 0 : 1;
}
