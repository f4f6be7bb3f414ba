// The built-in shell task, through Boost.Process: stdout and stderr are read concurrently by
// asio (no deadlock on a full pipe) and only their tails are kept.
//
// A command dies with the process that started it, also when that process is SIGKILLed (a
// worker killed by Slurm, the OOM killer, a user): nothing of a shell task keeps running on a
// node after its worker. Between fork and exec the child forks once more and stays behind as
// a guardian, with PR_SET_PDEATHSIG and the read end of a pipe whose write end only this
// process holds; the command runs in the guardian's process group. When this process goes (the
// pipe reports end-of-file) the guardian kills the whole group, the command's own children
// included; when the command ends, the guardian exits with its status.
#include <utility>

#include <boost/asio.hpp>
#include <boost/process.hpp>
#include <boost/process/extend.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "herd/error.hpp"
#include "herd/remote.hpp"
#include "herd/shell.hpp"
#include "task/job_task.hpp"
#include "task/log_capture.hpp"
#include "task/this_task.hpp"
#include "common/env.hpp"

namespace bp = boost::process;

namespace herd {
namespace {

/// Keeps the last `limit` bytes of a stream read in chunks. Inside a task on a worker, the
/// lines also go to the task's captured output as they come (`herd logs TASK` while it runs).
class Tail {
 public:
  Tail(bp::async_pipe& pipe, std::size_t limit, std::uint8_t stream, const detail::ShellSink* sink)
      : pipe_(pipe), limit_(limit), lines_(stream), stream_(stream), sink_(sink) {}
  void start() {
    pipe_.async_read_some(boost::asio::buffer(chunk_), [this](const boost::system::error_code& ec,
                                                              std::size_t n) {
      if (sink_ != nullptr && *sink_ && n > 0) (*sink_)(stream_, chunk_.data(), n);
      text_.append(chunk_.data(), n);
      lines_.add(chunk_.data(), n);
      if (text_.size() > 2 * limit_ + chunk_.size()) text_.erase(0, text_.size() - limit_);
      if (!ec) start();
    });
  }
  std::string take() {
    lines_.flush();
    if (text_.size() > limit_) text_.erase(0, text_.size() - limit_);
    return std::move(text_);
  }

 private:
  bp::async_pipe& pipe_;
  std::size_t limit_;
  std::array<char, 16384> chunk_{};
  std::string text_;
  task::TaskLineSplitter lines_;
  std::uint8_t stream_;
  const detail::ShellSink* sink_;
};

/// PATH lookup (bp::search_path would pull in the compiled Boost.Filesystem library).
std::string search_path(const std::string& name) {
  const char* path = env::get("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

/// Boost.Process initializer: the guardian described at the top of this file. Runs in the
/// child between fork and exec, so only async-signal-safe calls.
struct DieWithParent : bp::extend::handler {
  int watch_fd = -1;  // read end; the write end stays in this process only (O_CLOEXEC)
  pid_t parent = 0;

  template <typename Executor>
  void on_exec_setup(Executor&) const {
    ::setpgid(0, 0);  // the command's group (as bp::group makes it), whatever the handlers' order
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    const pid_t cmd = ::fork();
    if (cmd < 0) return;  // no guardian: the command still dies with the parent (PDEATHSIG)
    if (cmd == 0) {
      // The command: back to Boost, which execs it. Dies if its guardian dies.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(watch_fd);
      return;
    }
    guard(cmd);
  }

  [[noreturn]] void guard(pid_t cmd) const {
    // Outlive the parent long enough to kill the group: the pipe says when it is gone.
    ::prctl(PR_SET_PDEATHSIG, 0);
    // Hold nothing of the parent's (its pipes, sockets, other commands' watch pipes), so that
    // their ends close when they should.
    if (watch_fd > 0) (void)::syscall(SYS_close_range, 0u, static_cast<unsigned>(watch_fd - 1), 0u);
    (void)::syscall(SYS_close_range, static_cast<unsigned>(watch_fd + 1), ~0u, 0u);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cmd, 0));
    pollfd fds[2] = {{watch_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    while (true) {
      (void)::poll(fds, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 20);
      int status = 0;
      const pid_t r = ::waitpid(cmd, &status, WNOHANG);
      if (r == cmd || (r < 0 && errno == ECHILD)) {
        if (r == cmd && WIFSIGNALED(status)) {
          // The same end for whoever waits for us: killed by the same signal.
          struct sigaction dfl {};
          dfl.sa_handler = SIG_DFL;
          ::sigaction(WTERMSIG(status), &dfl, nullptr);
          ::kill(::getpid(), WTERMSIG(status));
          ::_exit(128 + WTERMSIG(status));
        }
        ::_exit(r == cmd && WIFEXITED(status) ? WEXITSTATUS(status) : 0);
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ::kill(0, SIGKILL);  // the parent is gone: the whole group (the command, what it started, us)
        ::_exit(137);
      }
    }
  }
};

/// Resident bytes of every process in group `pgid` (the command and what it started), but the
/// guardian that leads it (pid `pgid`: a fork of the worker, whose pages it shares).
std::uint64_t group_rss(pid_t pgid) {
  std::uint64_t pages = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // pid (comm) state ppid pgrp ...: after the last ')', field 3 on is space-separated.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string f;
    long pgrp = 0;
    unsigned long long rss = 0;
    for (int i = 3; i <= 24 && (fields >> f); ++i) {
      if (i == 5) pgrp = std::atol(f.c_str());
      if (i == 24) rss = std::strtoull(f.c_str(), nullptr, 10);
    }
    if (pgrp == pgid && std::atol(name.c_str()) != pgid) pages += rss;
  }
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string mib(std::uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

ShellResult shell(ShellCommand command) { return detail::shell_to(std::move(command), {}); }

namespace detail {
ShellResult shell_to(ShellCommand command, const ShellSink& sink) {
  if (command.script.empty() && command.argv.empty()) {
    throw std::invalid_argument("herd::shell: empty command");
  }
  const auto start = std::chrono::steady_clock::now();
  boost::asio::io_context io;
  bp::async_pipe out(io), err(io);
  bp::environment env = boost::this_process::environment();
  env.erase("HERD_ROLE");
  env.erase("HERD_ROLE_ARGS");
  // Inside a task that holds cores (TaskOptions::cpus): the command's threads fit them (its
  // processes run on them already: they inherit the task's mask).
  const TaskInfo& me = this_task();
  if (!me.cores.empty()) {
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) {
      env[name] = std::to_string(me.cores.size());
    }
  }
  const std::uint64_t memory_limit = me.memory;
  // Inside a multi-node task (TaskOptions::nodes): the nodes it holds, for mpirun / srun. The
  // task runs inside its worker's job step, which holds the allocation's CPUs: a step that
  // mpirun (or the command) starts with srun to reach the other nodes must share them
  // (SLURM_OVERLAP is srun's --overlap), or it waits for ever.
  if (const TaskInfo& info = detail::current_task(); !info.nodes.empty()) {
    env["SLURM_OVERLAP"] = "1";
    std::string hosts;
    for (const auto& h : info.nodes) hosts += (hosts.empty() ? "" : " ") + h;
    env["HERD_NODES"] = hosts;
    env["HERD_NUM_NODES"] = std::to_string(info.nodes.size());
    if (!info.node_file.empty()) env["HERD_NODE_FILE"] = info.node_file;
  }
  for (const auto& [k, v] : command.env) env[k] = v;
  std::vector<std::string> args = command.argv;
  std::string exe;
  if (!command.script.empty()) {
    exe = "/bin/sh";
    args = {"-c", command.script};
  } else {
    exe = command.argv[0];
    if (exe.find('/') == std::string::npos) exe = search_path(exe);
    if (exe.empty()) throw std::runtime_error("herd::shell: command not found: " + command.argv[0]);
    args.erase(args.begin());
  }
  const std::string cwd = command.cwd.empty() ? "." : command.cwd;
  // Its own process group, so a timeout also stops what the command started (sleep, srun...).
  bp::group group;
  int watch[2];
  if (::pipe2(watch, O_CLOEXEC) != 0) throw std::runtime_error("herd::shell: pipe: " + std::string(std::strerror(errno)));
  struct Close {
    int* fds;
    ~Close() {
      ::close(fds[0]);
      ::close(fds[1]);
    }
  } close_watch{watch};
  DieWithParent die_with_parent;
  die_with_parent.watch_fd = watch[0];
  die_with_parent.parent = ::getpid();
  bp::child child(exe, bp::args(args), bp::std_out > out, bp::std_err > err, bp::std_in.close(),
                  bp::start_dir(cwd), env, group, die_with_parent);
  Tail out_tail(out, command.tail_bytes, task::kStreamStdout, &sink),
      err_tail(err, command.tail_bytes, task::kStreamStderr, &sink);
  out_tail.start();
  err_tail.start();
  ShellResult result;
  // The worker may stop waiting for this task (its time limit, cancel(force)): then the
  // command's whole group is killed too.
  const std::shared_ptr<std::atomic<bool>> abandoned = detail::current_abandoned();
  // Its memory (TaskOptions::memory): the group's resident memory, sampled every 50 ms; past the
  // limit the whole group is killed.
  std::uint64_t over_memory = 0;
  auto within_memory = [&] {
    if (memory_limit == 0) return true;
    const std::uint64_t rss = group_rss(static_cast<pid_t>(child.id()));
    if (rss <= memory_limit) return true;
    over_memory = rss;
    return false;
  };
  if (command.timeout_s > 0 || abandoned || memory_limit > 0) {
    const auto deadline = command.timeout_s > 0 ? start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(command.timeout_s))
                                                : std::chrono::steady_clock::time_point::max();
    while (!io.stopped() && std::chrono::steady_clock::now() < deadline && !(abandoned && abandoned->load()) &&
           within_memory()) {
      io.run_for(std::chrono::milliseconds(50));
    }
    if (!io.stopped() && child.running()) {
      result.timed_out = !(abandoned && abandoned->load()) && over_memory == 0;
      group.terminate();
    }
    io.run();
  } else {
    io.run();
  }
  child.wait();
  const int native = child.native_exit_code();
  result.exit_code = WIFSIGNALED(native) ? 128 + WTERMSIG(native) : child.exit_code();
  result.stdout_tail = out_tail.take();
  result.stderr_tail = err_tail.take();
  result.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (over_memory > 0) {
    throw MemoryLimitExceeded("the command's processes reached " + mib(over_memory) + " resident, over the task's memory "
                              "limit of " + mib(memory_limit) + " (TaskOptions::memory; sampled every 50 ms): killed");
  }
  return result;
}
}  // namespace detail

}  // namespace herd
