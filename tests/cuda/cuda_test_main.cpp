// doctest's main for the CUDA tests: without a usable GPU, say why and exit 77 (CTest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "shardalg/backend/cuda/error.hpp"

int main(int argc, char** argv) {
  const auto probe = shardalg::cuda::probe_devices();
  if (!probe.available()) {
    std::printf("SKIPPED: no usable CUDA device — %s. The shardalg CUDA tests need a GPU; built and linked only.\n",
                probe.reason.c_str());
    return 77;
  }
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    std::printf("shardalg CUDA tests on %s (sm_%d%d), %d device(s)\n", prop.name, prop.major, prop.minor, probe.count);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
