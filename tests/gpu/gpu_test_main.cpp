// Entry point of the GPU tests (label gpu). Like tests/support/test_main.cpp, the binary is also
// its LocalCluster's worker program, so the role check comes first. Then, where no GPU is
// present (a CI machine that only compiles CUDA), the run ends with exit code 77, which ctest
// reports as "skipped" (SKIP_RETURN_CODE), not as a failure. Listing the tests (ctest's
// discovery at build time) works everywhere.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <herd/herd.hpp>

#include "gpu_test.hpp"

namespace {
bool g_one_test_case = false;  // the run selects exactly one test case by name
}  // namespace

void herd_test::skip_test(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  if (g_one_test_case) std::exit(77);
}

int main(int argc, char** argv) {
  herd::init(argc, argv);
  bool listing = false;
  int selected = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    listing = listing || arg.find("list") != std::string_view::npos;
    if (arg.rfind("--test-case=", 0) == 0 || arg.rfind("-tc=", 0) == 0) {
      const std::string_view names = arg.substr(arg.find('=') + 1);
      selected += names.find_first_of(",*?") == std::string_view::npos ? 1 : 2;
    }
  }
  g_one_test_case = selected == 1;
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
