// Process roles. A herd process is a client, a scheduler or a worker; the last two are entered
// either through the `herd` CLI or by re-executing the user's program with HERD_ROLE set.
//
// Who starts a role (the client library's LocalCluster, a job queue, a job script) only needs
// the environment names below. What a role runs lives above every other layer (src/cli/
// roles.cpp, which reaches the scheduler and the worker); it registers itself here when the
// library loads, so the client can enter a role without depending on the scheduler or worker.
#pragma once
#include <string>
#include <vector>

namespace herd::detail {

/// Environment variables carrying a role into a re-executed program.
inline constexpr const char* kRoleEnv = "HERD_ROLE";
inline constexpr const char* kRoleArgsEnv = "HERD_ROLE_ARGS";
/// Separates arguments inside HERD_ROLE_ARGS (ASCII unit separator: cannot occur in paths).
inline constexpr char kRoleArgSeparator = '\x1f';

std::string join_role_args(const std::vector<std::string>& args);

/// Runs a role ("scheduler", "worker") with its arguments; returns the exit code.
using RoleEntry = int (*)(const std::string& role, const std::vector<std::string>& args);
/// Called once, at load time, by src/cli/roles.cpp.
void set_role_entry(RoleEntry entry);

/// When HERD_ROLE=scheduler|worker is set, runs that role with HERD_ROLE_ARGS and exits.
void enter_role_if_requested();

}  // namespace herd::detail
