// Process roles. A herd process is a client, a scheduler or a worker; the last two are entered
// either through the `herd` CLI or by re-executing the user's program with HERD_ROLE set.
#pragma once
#include <string>
#include <vector>

#include "herd/remote.hpp"

namespace herd::detail {

/// `herd scheduler ARGS...` (args exclude the program name); returns the exit code.
int scheduler_main(const std::vector<std::string>& args);
/// `herd worker ARGS...`
int worker_main(const std::vector<std::string>& args);
/// `herd jobscript ARGS...`
int jobscript_main(const std::vector<std::string>& args);
/// `herd sweep ARGS...` (src/cli/sweep.cpp)
int sweep_main(const std::vector<std::string>& args);
/// `herd status ARGS...` (src/cli/status.cpp)
int status_main(const std::vector<std::string>& args);
/// `herd logs ARGS...` (src/cli/logs.cpp)
int logs_main(const std::vector<std::string>& args);

/// When HERD_ROLE=scheduler|worker is set, runs that role with HERD_ROLE_ARGS and exits.
void enter_role_if_requested();

/// Environment variables carrying a role into a re-executed program.
inline constexpr const char* kRoleEnv = "HERD_ROLE";
inline constexpr const char* kRoleArgsEnv = "HERD_ROLE_ARGS";
/// Separates arguments inside HERD_ROLE_ARGS (ASCII unit separator: cannot occur in paths).
inline constexpr char kRoleArgSeparator = '\x1f';

std::string join_role_args(const std::vector<std::string>& args);

/// The TaskInfo of the task on this thread (set by the worker).
TaskInfo& current_task();

}  // namespace herd::detail
