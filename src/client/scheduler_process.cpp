#include "client/scheduler_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/roles.hpp"
#include "common/process.hpp"
#include "herd/error.hpp"

namespace herd::detail {

std::string SchedulerProcess::start(std::vector<std::string> args, const std::map<std::string, std::string>& env,
                                    const std::string& log_path, std::chrono::milliseconds timeout, bool owned) {
  if (pid_ != 0) return address_;
  int ready[2], owner[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw ClusterError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(owner, O_CLOEXEC) != 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    throw ClusterError(std::string("pipe: ") + std::strerror(errno));
  }
  args.push_back("--ready-fd=" + std::to_string(ready[1]));
  if (owned) args.push_back("--parent-fd=" + std::to_string(owner[0]));
  else args.push_back("--detached");
  const std::string exe = process::self_executable();
  process::SpawnOptions spawn;
  spawn.argv = {exe};
  spawn.env = env;
  spawn.env[kRoleEnv] = "scheduler";
  spawn.env[kRoleArgsEnv] = join_role_args(args);
  spawn.keep_fds = {ready[1]};
  if (owned) spawn.keep_fds.push_back(owner[0]);
  spawn.stdout_path = log_path;
  try {
    pid_ = process::spawn(spawn);
  } catch (const std::exception& e) {
    for (int fd : {ready[0], ready[1], owner[0], owner[1]}) ::close(fd);
    throw ClusterError(std::string("cannot start the scheduler: ") + e.what());
  }
  ::close(ready[1]);
  ::close(owner[0]);
  owner_fd_ = owner[1];
  if (!owned) {  // nothing ties the scheduler to this process
    ::close(owner_fd_);
    owner_fd_ = -1;
  }
  // Read "<address>\n" (or "error: ...\n") from the scheduler, with a deadline.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{ready[0], POLLIN, 0};
    const int r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(ready[0]);
      stop(std::chrono::milliseconds(1000));
      throw ClusterError("the scheduler did not start within " + std::to_string(timeout.count()) + " ms");
    }
    char buf[1024];
    const ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n <= 0) {
      ::close(ready[0]);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = 0;
      stop(std::chrono::milliseconds(0));
      throw ClusterError("the scheduler (" + exe + ") " + process::describe_status(status) + " before it was ready" +
                         (line.empty() ? "" : ": " + line));
    }
    line.append(buf, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  line.erase(line.find('\n'));
  if (line.rfind("error: ", 0) == 0) {
    stop(std::chrono::milliseconds(5000));
    throw ClusterError("the scheduler failed to start: " + line.substr(7));
  }
  address_ = line;
  return address_;
}

void SchedulerProcess::stop(std::chrono::milliseconds grace) {
  if (owner_fd_ >= 0) {
    ::close(owner_fd_);  // the scheduler sees EOF and shuts down its workers
    owner_fd_ = -1;
  }
  if (pid_ > 0) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!process::try_reap(pid_) && std::chrono::steady_clock::now() < deadline) ::usleep(2000);
    process::terminate(pid_, 1000);
    pid_ = 0;
  }
}

}  // namespace herd::detail
