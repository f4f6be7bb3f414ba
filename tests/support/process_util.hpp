// Helpers for tests that watch real processes: /proc lookups, bounded waits, worker spawning.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "common/process.hpp"

namespace herd::testing {

/// Parent pid and state letter of a process, from /proc; nullopt when it does not exist.
inline std::optional<std::pair<pid_t, char>> proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  char state;
  pid_t ppid;
  rest >> state >> ppid;
  return std::make_pair(ppid, state);
}

/// Every process below `root` (not including it).
inline std::set<pid_t> descendants(pid_t root) {
  std::set<pid_t> out{root};
  bool grew = true;
  while (grew) {
    grew = false;
    DIR* d = ::opendir("/proc");
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0 || out.count(pid)) continue;
      if (auto st = proc_stat(pid); st && out.count(st->first)) {
        out.insert(pid);
        grew = true;
      }
    }
    ::closedir(d);
  }
  out.erase(root);
  return out;
}

/// Exists and is not a zombie.
inline bool alive(pid_t pid) {
  auto st = proc_stat(pid);
  return st && st->second != 'Z';
}

inline bool none_alive(const std::set<pid_t>& pids) {
  for (pid_t p : pids) {
    if (alive(p)) return false;
  }
  return true;
}

inline std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Polls `pred` until it holds or `limit` passes (a bounded wait on a condition, not a sleep).
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

/// The `herd` command of this build: test binaries sit in <build>/tests, the CLI in <build>.
inline std::string herd_cli_path() {
  const std::filesystem::path cli =
      std::filesystem::path(herd::process::self_executable()).parent_path().parent_path() / "herd";
  REQUIRE_MESSAGE(std::filesystem::exists(cli), "the herd CLI is not at " << cli);
  return cli.string();
}

/// Runs `command` through the shell and returns what it wrote to stdout; `rc` (if given) gets
/// its exit status, -1 when a signal ended it.
inline std::string run_command(const std::string& command, int* rc = nullptr) {
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed for: " + command);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  if (rc != nullptr) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

/// A `herd scheduler` process (`argv`, from the executable on, e.g. {HERD_CLI_PATH, "scheduler",
/// "--local-workers", "2"}) with its output to `log`, killed if this process dies; its pid and the
/// address it printed (within 20 s, else the test fails).
inline std::pair<pid_t, std::string> start_scheduler(std::vector<std::string> argv, const std::string& log) {
  process::SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.stdout_path = log;
  spawn.death_signal = SIGKILL;
  const pid_t pid = process::spawn(spawn);
  std::string address;
  REQUIRE(eventually([&] {
    const std::string text = read_file(log);
    const auto at = text.find("listening at ");
    if (at == std::string::npos) return false;
    address = text.substr(at + 13, text.find('\n', at) - at - 13);
    return true;
  }, std::chrono::seconds(20)));
  return {pid, address};
}

/// A worker process of the running test binary, outside any cluster object.
inline pid_t spawn_worker(const std::string& address, const std::string& name, const std::string& resources,
                          const std::string& log) {
  process::SpawnOptions spawn;
  spawn.argv = {process::self_executable()};
  spawn.env["HERD_ROLE"] = "worker";
  spawn.env["HERD_ROLE_ARGS"] =
      "--scheduler\x1f" + address + "\x1f--name\x1f" + name + "\x1f--resources\x1f" + resources;
  spawn.stdout_path = log;
  return process::spawn(spawn);
}

}  // namespace herd::testing
