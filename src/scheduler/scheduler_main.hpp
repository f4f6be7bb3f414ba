// `herd scheduler ARGS...`: the scheduler process's entry.
#pragma once
#include <string>
#include <vector>

namespace herd::detail {

/// Args exclude the program name; returns the exit code.
int scheduler_main(const std::vector<std::string>& args);

}  // namespace herd::detail
