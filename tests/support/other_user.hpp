// A second Unix user for the tests of what other users of a shared node can reach: created
// if missing ("herd-other", a system user without a home; needs root, as CI runs), and the
// probe (tests/support/probe.cpp) run as that user.
#pragma once

#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace herd::testing {

struct OtherUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

/// The second user, created on first use. Several test processes may race to create it.
inline OtherUser other_user() {
  const char* name = "herd-other";
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (const passwd* pw = ::getpwnam(name)) return {name, pw->pw_uid, pw->pw_gid};
    (void)std::system("useradd --system --no-create-home --shell /usr/sbin/nologin herd-other >/dev/null 2>&1");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("cannot create the test user herd-other (useradd; the tests need root)");
}

/// The probe, copied once into a directory the other user can read and run from (removed
/// when the test process exits).
inline std::string probe_path() {
  struct Copy {
    std::string dir, path;
    Copy() {
      char tmpl[] = "/tmp/herd-probe-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
      ::chmod(tmpl, 0755);
      dir = tmpl;
      path = dir + "/herd_test_probe";
      std::filesystem::copy_file(HERD_PROBE_PATH, path);
      ::chmod(path.c_str(), 0755);
    }
    ~Copy() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Copy copy;
  return copy.path;
}

/// Starts the probe as the other user with `args`; its stdout and stderr go to the returned fd.
inline pid_t start_as_other(const std::vector<std::string>& args, int* out_fd) {
  const OtherUser u = other_user();
  const std::string exe = probe_path();
  int pipefd[2];
  if (::pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  char env_home[] = "HOME=/nonexistent";
  char env_path[] = "PATH=/usr/bin:/bin";
  char* envp[] = {env_home, env_path, nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(u.gid) != 0 || ::setuid(u.uid) != 0) ::_exit(126);
    if (::getuid() != u.uid || ::geteuid() != u.uid) ::_exit(126);
    ::execve(exe.c_str(), argv.data(), envp);
    ::_exit(127);
  }
  ::close(pipefd[1]);
  *out_fd = pipefd[0];
  return pid;
}

struct ProbeResult {
  int rc = -1;
  std::string out;
  /// The value after "key " on its line ("" if absent).
  std::string get(const std::string& key) const {
    const auto at = out.find(key + " ");
    if (at == std::string::npos || (at > 0 && out[at - 1] != '\n')) return "";
    const auto end = out.find('\n', at);
    return out.substr(at + key.size() + 1, end == std::string::npos ? std::string::npos : end - at - key.size() - 1);
  }
};

/// Reads `fd` until EOF (or `limit`), then reaps `pid`.
inline ProbeResult finish_probe(pid_t pid, int fd, std::chrono::seconds limit = std::chrono::seconds(30)) {
  ProbeResult r;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    r.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  ::kill(pid, SIGKILL);  // no-op when it has exited
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs the probe as the other user and waits for it.
inline ProbeResult run_as_other(const std::vector<std::string>& args) {
  int fd = -1;
  const pid_t pid = start_as_other(args, &fd);
  return finish_probe(pid, fd);
}

/// Bytes as hex, for the probe's arguments.
inline std::string hex(const std::string& bytes) {
  static constexpr char k[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out += k[c >> 4];
    out += k[c & 15];
  }
  return out;
}

}  // namespace herd::testing
