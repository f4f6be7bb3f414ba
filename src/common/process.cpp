#include "common/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

extern char** environ;

namespace herd::process {

pid_t spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw std::invalid_argument("spawn: empty argv");
  // Build argv/envp before fork: the child may only make async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    bool drop = o.env.count(key) > 0;
    for (const auto& u : o.unset_env) drop = drop || u == key;
    if (!drop) env_strings.push_back(std::move(kv));
  }
  for (const auto& [k, v] : o.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_fd = -1;
  if (!o.stdout_path.empty()) {
    // A log: what the process prints may hold secrets, so it is this user's alone.
    out_fd = ::open(o.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out_fd < 0) throw std::system_error(errno, std::generic_category(), "open " + o.stdout_path);
  }
  // A pipe that reports exec failure: closed by a successful exec (CLOEXEC), or carries errno.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    if (out_fd >= 0) ::close(out_fd);
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (o.death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, o.death_signal);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    }
    for (int fd : o.keep_fds) {
      const int flags = ::fcntl(fd, F_GETFD);
      ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    if (out_fd >= 0) {
      ::dup2(out_fd, 1);
      ::dup2(out_fd, 2);
    }
    (void)::setpgid(0, 0);  // own process group: terminal ^C goes to the client only
    ::execve(argv[0], argv.data(), envp.data());
    const int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  if (out_fd >= 0) ::close(out_fd);
  int child_errno = 0;
  const ssize_t n = ::read(err_pipe[0], &child_errno, sizeof child_errno);
  ::close(err_pipe[0]);
  if (n == sizeof child_errno) {
    ::waitpid(pid, nullptr, 0);
    throw std::system_error(child_errno, std::generic_category(), "cannot execute " + o.argv[0]);
  }
  return pid;
}

bool try_reap(pid_t pid, int* status) {
  int s = 0;
  const pid_t r = ::waitpid(pid, &s, WNOHANG);
  if (r == pid) {
    if (status != nullptr) *status = s;
    return true;
  }
  if (r < 0 && errno == ECHILD) {
    if (status != nullptr) *status = 0;
    return true;
  }
  return false;
}

void terminate(pid_t pid, int grace_ms) {
  if (pid <= 0 || try_reap(pid)) return;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (try_reap(pid)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "status " + std::to_string(status);
}

namespace {

/// The whole of a small /proc file ("" when it cannot be read).
std::string read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

std::uint64_t rss_of(pid_t pid) {
  const std::string statm = read_small("/proc/" + std::to_string(pid) + "/statm");
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(statm.c_str(), "%llu %llu", &size, &resident) != 2) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// Children of `pid`: /proc/PID/task/TID/children lists those each thread forked.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(tasks.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string list = read_small(tasks + "/" + e->d_name + "/children");
    const char* p = list.c_str();
    char* end = nullptr;
    for (long v = std::strtol(p, &end, 10); end != p; v = std::strtol(p, &end, 10)) {
      out.push_back(static_cast<pid_t>(v));
      p = end;
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

std::uint64_t tree_rss_bytes(pid_t pid) {
  std::uint64_t total = 0;
  std::vector<pid_t> todo = {pid};
  std::size_t seen = 0;
  while (!todo.empty() && seen < 100000) {  // bounded, should /proc change under us
    const pid_t p = todo.back();
    todo.pop_back();
    ++seen;
    total += rss_of(p);
    for (pid_t c : children_of(p)) todo.push_back(c);
  }
  return total;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::system_error(errno, std::generic_category(), "readlink /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace herd::process
