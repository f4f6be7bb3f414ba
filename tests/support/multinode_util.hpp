// Helpers for tests on the multi-node test bed (scripts/local-slurm.sh start --nodes N; label
// multinode). ctest runs these tests on the bed's login host (tests/multinode/on_login.sh), so
// Slurm commands work as on a cluster's login node. Faults are the script's verbs, made through
// guards that undo them when they go out of scope, also when a check fails (doctest throws):
//
//   auto down = bed::link_down("node2");   // node2's cable is out ...
//   CHECK(...);
//   }                                      // ... and back in here, whatever happened
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "support/process_util.hpp"
#include "support/slurm_util.hpp"

#ifndef HERD_LOCAL_SLURM
#error "HERD_LOCAL_SLURM (the path of scripts/local-slurm.sh) must be defined by the build"
#endif

namespace herd::testing::bed {

/// scripts/local-slurm.sh of the source tree this test was built from.
inline std::string script() { return HERD_LOCAL_SLURM; }

/// The compute hosts, node1..nodeN (HERD_SLURM_NODES, set by `local-slurm.sh exec`).
inline std::vector<std::string> nodes() {
  std::istringstream in(env_value("HERD_SLURM_NODES", ""));
  std::vector<std::string> out;
  for (std::string n; in >> n;) out.push_back(n);
  return out;
}

/// Runs `local-slurm.sh ARGS...` and returns what it did (bounded: 120 s).
inline herd::ShellResult script_run(std::vector<std::string> args) {
  args.insert(args.begin(), script());
  herd::ShellCommand command{std::move(args)};
  command.timeout_s = 120;
  return herd::shell(command);
}

/// A verb that must work.
inline void verb(const std::vector<std::string>& args) {
  auto r = script_run(args);
  REQUIRE_MESSAGE(r.ok(), "local-slurm.sh " << args.front() << " failed: " << r.stderr_tail);
}

/// Undoes a fault on destruction (script verbs, in order). Movable, not copyable.
class Fault {
 public:
  explicit Fault(std::vector<std::string> undo) { undo_.push_back(std::move(undo)); }
  explicit Fault(std::vector<std::vector<std::string>> undo) : undo_(std::move(undo)) {}
  Fault(Fault&& other) noexcept : undo_(std::move(other.undo_)) { other.undo_.clear(); }
  Fault& operator=(Fault&&) = delete;
  Fault(const Fault&) = delete;
  Fault& operator=(const Fault&) = delete;
  ~Fault() { undo(); }

  /// Undo now (idempotent).
  void undo() noexcept {
    auto steps = std::move(undo_);
    undo_.clear();
    for (const auto& args : steps) {
      try {
        auto r = script_run(args);
        if (!r.ok()) std::fprintf(stderr, "bed: undo '%s' failed: %s\n", args.front().c_str(), r.stderr_tail.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bed: undo '%s' failed: %s\n", args.front().c_str(), e.what());
      }
    }
  }

 private:
  std::vector<std::vector<std::string>> undo_;
};

/// HOST's link goes down (silent: no RST, TCP connections hang) until the guard goes.
[[nodiscard]] inline Fault link_down(const std::string& host) {
  verb({"link-down", host});
  return Fault{{"link-up", host}};
}

/// Every process of HOST is SIGKILLed at once; the guard revives it (and waits for Slurm).
[[nodiscard]] inline Fault crash(const std::string& host) {
  verb({"crash", host});
  return Fault{{"revive", host}};
}

/// Every process of HOST stops where it is (the cgroup freezer: a hung node) until the guard
/// goes; then they all go on, with whatever they believed before.
[[nodiscard]] inline Fault freeze(const std::string& host) {
  verb({"freeze", host});
  return Fault{{"thaw", host}};
}

/// HOST vanishes as a crashed node does: its cable out first (so that nothing it sends, not
/// even a reset, gets out), then every process on it killed. The guard plugs the cable back in,
/// then revives the host (slurmd must reach slurmctld to register).
[[nodiscard]] inline Fault vanish(const std::string& host) {
  verb({"link-down", host});
  verb({"crash", host});
  return Fault{std::vector<std::vector<std::string>>{{"link-up", host}, {"revive", host}}};
}

/// HOST hangs: its cable out, then every process on it frozen where it is. The guard plugs the
/// cable back in and lets the processes go on: whatever they believed, they come back with.
[[nodiscard]] inline Fault hang(const std::string& host) {
  verb({"link-down", host});
  verb({"freeze", host});
  return Fault{std::vector<std::vector<std::string>>{{"link-up", host}, {"thaw", host}}};
}

/// HOST's link runs at `rate` (tc words: 20mbit) each way until the guard goes.
[[nodiscard]] inline Fault slow(const std::string& host, const std::string& rate) {
  verb({"slow", host, rate});
  return Fault{{"unslow", host}};
}

/// Hosts a and b drop each other's packets (silently) until the guard goes.
[[nodiscard]] inline Fault partition(const std::string& a, const std::string& b) {
  verb({"partition", a, b});
  return Fault{{"heal", a, b}};
}

/// HOST drops new TCP connections except to `ports` (and slurmd's), silently, until the guard goes.
[[nodiscard]] inline Fault firewall(const std::string& host, const std::vector<std::string>& ports) {
  std::vector<std::string> args{"firewall", host};
  args.insert(args.end(), ports.begin(), ports.end());
  verb(args);
  return Fault{{"unfirewall", host}};
}

/// Every test starts from a whole bed: on its login host, with every fault of an earlier test
/// (one killed by its timeout has no guard left to run) undone.
inline void require_whole_bed(std::size_t min_nodes) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  REQUIRE_MESSAGE(std::string(host) == "login",
                  "not on the test bed's login host (run through tests/multinode/on_login.sh)");
  REQUIRE_MESSAGE(nodes().size() >= min_nodes, "the bed has " << nodes().size() << " nodes, this test needs " << min_nodes);
  verb({"repair"});
}

/// Slurm's state of `node` as sinfo prints it: idle, mixed, down*, ...
inline std::string node_state(const std::string& node) {
  auto r = run({"sinfo", "--noheader", "--Node", "--nodes=" + node, "--format=%T"});
  return r.stdout_tail.substr(0, r.stdout_tail.find('\n'));
}

/// State of a job as scontrol sees it (RUNNING, NODE_FAIL, ...), "" when Slurm forgot it.
inline std::string job_state(const std::string& id) {
  auto r = run({"scontrol", "--oneliner", "show", "job", id});
  const auto at = r.stdout_tail.find("JobState=");
  if (at == std::string::npos) return "";
  const auto from = at + 9;
  return r.stdout_tail.substr(from, r.stdout_tail.find(' ', from) - from);
}

/// A batch job pinned to `node` that runs `command` (sbatch --wrap), its output in `output`.
/// Cancelled when it goes out of scope.
class Job {
 public:
  Job(const std::string& node, const std::string& name, const std::string& output, const std::string& command,
      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> cmd{"sbatch", "--parsable", "--nodelist=" + node, "--job-name=" + name,
                                 "--output=" + output, "--mem=50M", "--time=10"};
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    cmd.push_back("--wrap=" + command);
    auto r = run(cmd);
    REQUIRE_MESSAGE(r.exit_code == 0, "sbatch on " << node << ": " << r.stderr_tail);
    id_ = r.stdout_tail.substr(0, r.stdout_tail.find_first_of(";\n"));
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() {
    if (!id_.empty()) run({"scancel", id_});
  }
  const std::string& id() const { return id_; }

 private:
  std::string id_;
};

/// Processes of HOST (its cgroup, as the script makes it: <cgroup2 root>/<prefix>hosts/HOST)
/// whose executable is `exe` (all of them when `exe` is empty).
inline std::vector<int> host_processes(const std::string& host, const std::string& exe = "") {
  std::string root;
  {
    std::istringstream mounts(read_file("/proc/self/mounts"));
    for (std::string dev, dir, type, rest; mounts >> dev >> dir >> type && std::getline(mounts, rest);) {
      if (type == "cgroup2") {
        root = dir;
        break;
      }
    }
  }
  std::vector<int> out;
  if (root.empty()) return out;
  std::istringstream procs(read_file(root + "/" + env_value("HERD_SLURM_NETNS_PREFIX", "herd-") + "hosts/" + host + "/cgroup.procs"));
  for (int pid; procs >> pid;) {
    if (!exe.empty()) {
      char buf[4096] = {};
      const std::string link = "/proc/" + std::to_string(pid) + "/exe";
      const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
      if (n <= 0 || std::string(buf, static_cast<std::size_t>(n)) != exe) continue;
    }
    out.push_back(pid);
  }
  return out;
}

/// Lines of a file that start with `prefix`.
inline std::vector<std::string> lines_with(const std::string& path, const std::string& prefix) {
  std::istringstream in(read_file(path));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

}  // namespace herd::testing::bed
