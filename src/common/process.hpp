// Child processes for the local job queue and LocalCluster. fork/exec by hand (not
// Boost.Process) because the child must set PR_SET_PDEATHSIG and keep one chosen fd between
// fork and exec, which only a raw fork allows.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace herd::process {

struct SpawnOptions {
  std::vector<std::string> argv;              // argv[0] is the executable path
  std::map<std::string, std::string> env;     // added to (or replacing in) the current env
  std::vector<std::string> unset_env;         // removed from the child's env
  int death_signal = 0;                       // PR_SET_PDEATHSIG in the child, 0 = none
  std::vector<int> keep_fds;                  // fds the child inherits (CLOEXEC cleared)
  std::string stdout_path;                    // redirect stdout (and stderr) there if set
};

/// Starts a child; throws std::system_error naming the executable on failure.
pid_t spawn(const SpawnOptions& options);

/// Non-blocking reap; true (and the status) when the child has exited.
bool try_reap(pid_t pid, int* status = nullptr);

/// SIGTERM, wait up to grace_ms, then SIGKILL and reap.
void terminate(pid_t pid, int grace_ms);

/// "exited with code 3" / "killed by signal 9 (Killed)".
std::string describe_status(int status);

/// Path of the running executable (/proc/self/exe resolved).
std::string self_executable();

/// Resident bytes of process `pid` and of all its descendants (from /proc: each thread's
/// `children`, each process's `statm`), e.g. a worker and the shell commands its tasks run,
/// so that a memory limit counts what a task started. Pages shared between them (after fork)
/// count once per process. 0 when `pid` is gone.
std::uint64_t tree_rss_bytes(pid_t pid);

}  // namespace herd::process
