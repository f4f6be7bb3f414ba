// LocalCluster: starts `<this program> ` in scheduler mode, which starts the workers.
//
// No orphans: the scheduler holds the read end of a pipe whose write end only this process
// holds; when this process exits for any reason (SIGKILL included) the kernel closes it, the
// scheduler sees EOF, stops its workers and exits. Workers also carry PR_SET_PDEATHSIG(SIGKILL)
// against the scheduler, and exit on their own when the scheduler goes silent.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <cerrno>
#include <chrono>

#include "api/runtime.hpp"
#include "common/process.hpp"
#include "herd/cluster.hpp"
#include "herd/error.hpp"

namespace herd {

struct LocalCluster::Impl {
  int n_workers = 2;
  int threads = 1;
  std::string worker_exe;
  std::vector<std::string> worker_args;
  std::map<std::string, std::string> env;
  std::chrono::milliseconds start_timeout{30000};
  std::string log_dir;
  pid_t pid = 0;
  int owner_fd = -1;  // write end of the owner pipe
  std::string address;
};

LocalCluster::LocalCluster(int n_workers, int threads_per_worker) : impl_(std::make_unique<Impl>()) {
  detail::enter_role_if_requested();
  workers(n_workers);
  this->threads_per_worker(threads_per_worker);
}
LocalCluster::LocalCluster(LocalCluster&&) noexcept = default;
LocalCluster& LocalCluster::operator=(LocalCluster&&) noexcept = default;
LocalCluster::~LocalCluster() {
  if (impl_) close();
}

LocalCluster& LocalCluster::workers(int n) & {
  if (n < 0) throw std::invalid_argument("LocalCluster: workers must be >= 0, got " + std::to_string(n));
  impl_->n_workers = n;
  return *this;
}
LocalCluster& LocalCluster::threads_per_worker(int n) & {
  if (n < 1) throw std::invalid_argument("LocalCluster: threads_per_worker must be >= 1, got " + std::to_string(n));
  impl_->threads = n;
  return *this;
}
LocalCluster& LocalCluster::worker_executable(std::string path) & {
  impl_->worker_exe = std::move(path);
  return *this;
}
LocalCluster& LocalCluster::worker_args(std::vector<std::string> args) & {
  impl_->worker_args = std::move(args);
  return *this;
}
LocalCluster& LocalCluster::env(std::string name, std::string value) & {
  impl_->env[std::move(name)] = std::move(value);
  return *this;
}
LocalCluster& LocalCluster::start_timeout(std::chrono::milliseconds t) & {
  impl_->start_timeout = t;
  return *this;
}
LocalCluster& LocalCluster::log_directory(std::string path) & {
  impl_->log_dir = std::move(path);
  return *this;
}
int LocalCluster::expected_workers() const { return impl_->n_workers; }
int LocalCluster::scheduler_pid() const { return impl_->pid; }

std::string LocalCluster::start() {
  Impl& m = *impl_;
  if (m.pid != 0) return m.address;
  int ready[2], owner[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(owner, O_CLOEXEC) != 0) {
    throw ClusterError(std::string("LocalCluster: pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> args = {
      "--ready-fd=" + std::to_string(ready[1]), "--parent-fd=" + std::to_string(owner[0]),
      "--local-workers=" + std::to_string(m.n_workers), "--nthreads=" + std::to_string(m.threads)};
  const std::string exe = process::self_executable();
  args.push_back("--worker-exe=" + (m.worker_exe.empty() ? exe : m.worker_exe));
  for (const auto& a : m.worker_args) args.push_back("--worker-arg=" + a);
  if (!m.log_dir.empty()) args.push_back("--log-dir=" + m.log_dir);
  process::SpawnOptions spawn;
  spawn.argv = {exe};
  spawn.env = m.env;
  spawn.env[detail::kRoleEnv] = "scheduler";
  spawn.env[detail::kRoleArgsEnv] = detail::join_role_args(args);
  spawn.keep_fds = {ready[1], owner[0]};
  if (!m.log_dir.empty()) spawn.stdout_path = m.log_dir + "/scheduler.log";
  try {
    m.pid = process::spawn(spawn);
  } catch (const std::exception& e) {
    ::close(ready[0]);
    ::close(ready[1]);
    ::close(owner[0]);
    ::close(owner[1]);
    throw ClusterError(std::string("LocalCluster: cannot start the scheduler: ") + e.what());
  }
  ::close(ready[1]);
  ::close(owner[0]);
  m.owner_fd = owner[1];
  // Read "<address>\n" (or "error: ...\n") from the scheduler, with a deadline.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + m.start_timeout;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{ready[0], POLLIN, 0};
    const int r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(ready[0]);
      close();
      throw ClusterError("LocalCluster: the scheduler did not start within " +
                         std::to_string(m.start_timeout.count()) + " ms");
    }
    char buf[512];
    const ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n <= 0) {
      ::close(ready[0]);
      int status = 0;
      ::waitpid(m.pid, &status, 0);
      m.pid = 0;
      close();
      throw ClusterError("LocalCluster: the scheduler (" + exe + ") " + process::describe_status(status) +
                         " before it was ready" + (line.empty() ? "" : ": " + line));
    }
    line.append(buf, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  line.erase(line.find('\n'));
  if (line.rfind("error: ", 0) == 0) {
    close();
    throw ClusterError("LocalCluster: the scheduler failed to start: " + line.substr(7));
  }
  m.address = line;
  return m.address;
}

void LocalCluster::close() {
  Impl& m = *impl_;
  if (m.owner_fd >= 0) {
    ::close(m.owner_fd);  // the scheduler sees EOF and shuts down its workers
    m.owner_fd = -1;
  }
  if (m.pid > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!process::try_reap(m.pid) && std::chrono::steady_clock::now() < deadline) {
      ::usleep(2000);
    }
    process::terminate(m.pid, 1000);
    m.pid = 0;
  }
}

}  // namespace herd
