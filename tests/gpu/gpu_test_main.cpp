// Entry point of the GPU tests (label gpu). Like tests/support/test_main.cpp, the binary is also
// its LocalCluster's worker program, so the role check comes first. Then, where no GPU is
// present (a CI machine that only compiles CUDA), the run ends with exit code 77, which ctest
// reports as "skipped" (SKIP_RETURN_CODE), not as a failure. Listing the tests (ctest's
// discovery at build time) works everywhere.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string_view>

#include <herd/herd.hpp>

int main(int argc, char** argv) {
  herd::init(argc, argv);
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::string_view(argv[i]).find("list") != std::string_view::npos;
  if (!listing) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      std::printf("skipped: no GPU present (%s)\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
