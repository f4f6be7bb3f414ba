// Shared by the GPU tests and their entry point (gpu_test_main.cpp).
#pragma once

#include <string>

namespace herd_test {

/// Ends a test this machine cannot run (e.g. it needs 2 GPUs and has 1). When the process runs
/// just this test case, as ctest runs each one (`--test-case=NAME`), it exits 77 so that ctest
/// reports the test as skipped rather than passed. When several test cases share the process,
/// it prints why and returns; the caller then returns from the test.
void skip_test(const std::string& why);

}  // namespace herd_test
