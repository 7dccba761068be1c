// tests/emu/emu_mutation.cpp — the emulated-device backend catches the defect it was built for.
//
// Before commit 5f2f84e, replicas_agree (include/shardalg/bridge/dense.hpp) compared a replica with
// rank 0's copy by memcmp of the two blocks' data() pointers: on the host, for any backend. On the
// CPU that is fine; on a GPU both are device pointers and the first real run crashed; the CPU
// suites could not see it. `unmended_replicas_agree` below is that old body, kept here only.
//
//   emu_mutation mended     the library's replicas_agree on 2 EmuBackend ranks: prints, exits 0
//   emu_mutation unmended   the old body on the same tensor: must die of SIGSEGV with the emu
//                           fault handler's line naming the address and the allocation
//                           (CTest: expect_fault.cmake checks both; it must never print "returned")
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "shardalg/backend/emu/backend.hpp"
#include "shardalg/backend/emu/sim_comm.hpp"
#include "shardalg/core.hpp"

namespace {
using namespace shardalg;

/// replicas_agree as it was before 5f2f84e: the blocks' bytes compared on the host.
template <class T, WholeLayout L, class B>
bool unmended_replicas_agree(const Sharded<T, L, B>& x) {
  Group g = x.group();
  const CallInfo info{"R", "R", true};
  auto root = x.local();
  g.broadcast(root.data(), static_cast<std::size_t>(root.size()), 0, info);
  const auto bytes = static_cast<std::size_t>(root.size()) * sizeof(T);
  std::int32_t differ = bytes == 0 || std::memcmp(root.data(), x.local().data(), bytes) == 0 ? 0 : 1;
  g.all_reduce(&differ, 1, ReduceOp::max, info);
  return differ == 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "mended" && mode != "unmended") {
    std::fprintf(stderr, "usage: emu_mutation mended|unmended\n");
    return 2;
  }
  const rlimit no_core{0, 0};  // the unmended run dies on purpose: no core file
  ::setrlimit(RLIMIT_CORE, &no_core);
  using Mat = CpuBackend::matrix<float>;
  Mat a(3, 4);
  for (Index i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(i % 5) - 2.0f;
  std::vector<int> agree(2, -1);
  emu::run_emu_ranks(2, [&](emu::EmuComm& c) {
    auto x = shard<Replicated, Mat, emu::EmuBackend>(a, Group(c));
    agree[static_cast<std::size_t>(c.rank())] = mode == "mended" ? replicas_agree(x) : unmended_replicas_agree(x);
  });
  std::printf("%s: replicas_agree on 2 emu ranks returned %d, %d\n", mode.c_str(), agree[0], agree[1]);
  return agree == std::vector<int>{1, 1} ? 0 : 1;
}
