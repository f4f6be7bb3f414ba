// Helpers for tests against the one-machine Slurm: squeue look-ups, bounded waits, options.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <herd/herd.hpp>

#include "support/process_util.hpp"

namespace herd::testing {

inline std::string env_value(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

inline herd::ShellResult run(std::vector<std::string> argv) { return herd::shell(herd::ShellCommand{std::move(argv)}); }

/// Jobs named `name` still in the queue: id -> state.
inline std::map<std::string, std::string> queued(const std::string& name) {
  auto r = run({"squeue", "--noheader", "-r", "--name=" + name, "--format=%i %T"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.stderr_tail);
  std::map<std::string, std::string> jobs;
  std::istringstream in(r.stdout_tail);
  std::string id, state;
  while (in >> id >> state) jobs[id] = state;
  return jobs;
}

inline std::size_t count_state(const std::map<std::string, std::string>& jobs, const std::string& state) {
  std::size_t n = 0;
  for (const auto& [id, s] : jobs) n += (s == state);
  return n;
}

/// Slurm must be there when the suite says so (scripts/test.sh); skipping silently would hide
/// a broken set-up.
inline bool slurm_up() {
  static const bool up = run({"sinfo", "--noheader"}).exit_code == 0;
  if (!up && std::getenv("HERD_REQUIRE_SLURM") != nullptr) FAIL("Slurm is not reachable (SLURM_CONF=" << env_value("SLURM_CONF", "") << ")");
  return up;
}

inline std::string unique(const std::string& what) { return "herd-t-" + what + "-" + std::to_string(::getpid()); }

inline herd::SlurmOptions options(const std::string& name) {
  return herd::SlurmOptions{}
      .job_name(name)
      .partition("cpu")
      .cores(1)
      .memory("300M")
      .walltime("00:10:00")
      .log_directory("/tmp/herd-slurm-test-logs");
}

}  // namespace herd::testing
