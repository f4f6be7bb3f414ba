// Test entry point: a test binary is also the program its LocalCluster's workers run, so the
// role check comes before doctest sees the command line.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <herd/herd.hpp>

int main(int argc, char** argv) {
  herd::init(argc, argv);
  doctest::Context context(argc, argv);
  return context.run();
}
