// Starting a scheduler process owned by this one (LocalCluster, SlurmCluster).
//
// No orphans: the scheduler holds the read end of a pipe whose write end only this process
// holds; when this process exits for any reason (SIGKILL included) the kernel closes it, the
// scheduler sees EOF, stops its workers (scancel for Slurm pools) and exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace herd::detail {

class SchedulerProcess {
 public:
  ~SchedulerProcess() { stop(std::chrono::seconds(10)); }
  /// Runs this program in scheduler mode with `args`; returns the address it bound.
  /// @throws ClusterError with the scheduler's own error when it fails to start.
  /// `owned` false: no owner pipe, the scheduler outlives this process (SlurmCluster::keep_scheduler).
  std::string start(std::vector<std::string> args, const std::map<std::string, std::string>& env,
                    const std::string& log_path, std::chrono::milliseconds timeout, bool owned = true);
  /// Lets the scheduler run on: forgotten here, neither told nor killed.
  void detach() {
    pid_ = 0;
    owner_fd_ = -1;
  }
  /// Closes the owner pipe, waits up to `grace` for the scheduler to finish, then kills it.
  void stop(std::chrono::milliseconds grace);
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = 0;
  int owner_fd_ = -1;
  std::string address_;
};

}  // namespace herd::detail
