// A tiny OpenMP program for the core and memory tests (tests/integration/test_hpc.cpp):
//   omp_probe threads       prints "max_threads=N team=N affinity=N omp_env=V"
//   omp_probe alloc MIB     touches MIB MiB, then sleeps 30 s (killed at its memory limit first)
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "threads") == 0) {
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    cpu_set_t mask;
    CPU_ZERO(&mask);
    sched_getaffinity(0, sizeof mask, &mask);
    const char* env = std::getenv("OMP_NUM_THREADS");
    std::printf("max_threads=%d team=%d affinity=%d omp_env=%s\n", omp_get_max_threads(), team, CPU_COUNT(&mask),
                env != nullptr ? env : "unset");
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "alloc") == 0) {
    const std::size_t mib = std::strtoull(argv[2], nullptr, 10);
    std::vector<char*> blocks;
    for (std::size_t i = 0; i < mib; ++i) {
      char* p = static_cast<char*>(std::malloc(1 << 20));
      if (p == nullptr) return 3;
      std::memset(p, 1, 1 << 20);
      blocks.push_back(p);
    }
    std::printf("holding %zu MiB\n", mib);
    std::fflush(stdout);
    sleep(30);
    return 0;
  }
  std::fprintf(stderr, "usage: omp_probe threads | alloc MIB\n");
  return 2;
}
