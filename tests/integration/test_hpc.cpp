// Cores and memory as resources (issue 45): tasks pinned to disjoint cores of their worker, an
// OpenMP program run as a shell task sees its cores, memory limits kill shell commands and
// isolated children; and preemptions counted apart from retries (checkpointable). Real
// processes on loopback.
#include <doctest/doctest.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/checkpoint_task.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

int available_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return 1;
  return CPU_COUNT(&mask);
}

std::vector<int> my_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ::sched_getaffinity(0, sizeof mask, &mask);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) out.push_back(c);
  }
  return out;
}

std::string temp_dir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("herd-hpc-" + name + "-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

/// Waits until `peers` tasks have arrived (marker files in `dir`), so that they all run at once,
/// then returns {this_task().cpus(), the thread's affinity mask}.
std::pair<std::vector<int>, std::vector<int>> pinned_together(std::string dir, std::string me, int peers) {
  std::ofstream(dir + "/" + me + ".here") << "1\n";
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    int here = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) here += e.path().extension() == ".here";
    if (here >= peers) break;
    std::this_thread::sleep_for(10ms);
  }
  return {herd::this_task().cpus(), my_mask()};
}
HERD_TASK(pinned_together);

/// In an isolated child: its OMP_NUM_THREADS and the size of its mask.
std::pair<std::string, int> child_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  return {v != nullptr ? v : "unset", static_cast<int>(my_mask().size())};
}
HERD_TASK(child_threads);

/// Touches `mib` MiB (in an isolated child held to its memory).
std::size_t touch_mib(std::size_t mib) {
  std::vector<std::vector<char>> blocks;
  for (std::size_t i = 0; i < mib; ++i) blocks.emplace_back(1 << 20, 1);
  return blocks.size();
}
HERD_TASK(touch_mib);

/// Appends a line to `marker`, then throws.
int throws_once(std::string marker) {
  std::ofstream(marker, std::ios::app) << herd::this_task().worker << "\n";
  throw std::runtime_error("a real failure, not a preemption");
}
HERD_TASK(throws_once);

HERD_TASK(ckpt_sum);

TEST_CASE("Hpc.Cores.TasksRunOnDisjointCores" * doctest::timeout(120)) {
  // Two tasks of half the worker's cores each (2 of 4, or 1 of 2 on a 2-core machine), running
  // at once: each runs on cores no other holds, as many as it asked for, and this_task().cpus()
  // names them.
  const int cpus = available_cpus();
  if (cpus < 2) {
    MESSAGE("one core here: nothing to keep apart");
    return;
  }
  const int worker_cpus = std::min(cpus, 4);
  const int each = worker_cpus / 2;
  const std::string dir = temp_dir("pin");
  herd::Client client{herd::LocalCluster{1}.worker_args({"--cpus", std::to_string(worker_cpus)})};
  client.wait_for_workers(1, 60s);
  const auto status = client.status();
  REQUIRE(status.workers.size() == 1);
  CHECK(status.workers[0].resources.at("cpus") == worker_cpus);
  CHECK(status.workers[0].resources.at("memory") > 0);
  auto a = client.submit(herd::TaskOptions{}.cpus(static_cast<std::uint32_t>(each)), pinned_together, dir,
                         std::string("a"), 2);
  auto b = client.submit(herd::TaskOptions{}.cpus(static_cast<std::uint32_t>(each)), pinned_together, dir,
                         std::string("b"), 2);
  const auto [named_a, mask_a] = a.result(60s);
  const auto [named_b, mask_b] = b.result(60s);
  CHECK(named_a == mask_a);
  CHECK(named_b == mask_b);
  CHECK(mask_a.size() == static_cast<std::size_t>(each));
  CHECK(mask_b.size() == static_cast<std::size_t>(each));
  for (int c : mask_a) CHECK(std::find(mask_b.begin(), mask_b.end(), c) == mask_b.end());
  std::filesystem::remove_all(dir);
}

TEST_CASE("Hpc.Cores.OpenMpShellTaskSeesItsCores" * doctest::timeout(120)) {
  const int n = std::min(available_cpus(), 2);
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1, 60s);
  herd::ShellCommand cmd;
  cmd.argv = {HERD_OMP_PROBE, "threads"};
  auto f = client.submit(herd::TaskOptions{}.cpus(static_cast<std::uint32_t>(n)), herd::shell, cmd);
  const herd::ShellResult r = f.result(60s);
  INFO(r.stdout_tail << r.stderr_tail);
  CHECK(r.exit_code == 0);
  const std::string want = "max_threads=" + std::to_string(n) + " team=" + std::to_string(n) +
                           " affinity=" + std::to_string(n) + " omp_env=" + std::to_string(n);
  CHECK(r.stdout_tail.find(want) == 0);
  // An isolated child: its mask and OMP_NUM_THREADS too.
  auto c = client.submit(herd::TaskOptions{}.cpus(1).isolated(), child_threads);
  CHECK(c.result(60s) == std::make_pair(std::string("1"), 1));
}

TEST_CASE("Hpc.Memory.ShellCommandAndIsolatedChildKilledAtTheirLimit" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1, 60s);
  herd::ShellCommand cmd;
  cmd.argv = {HERD_OMP_PROBE, "alloc", "512"};
  auto f = client.submit(herd::TaskOptions{}.memory(64ull << 20), herd::shell, cmd);
  try {
    (void)f.result(60s);
    FAIL("the command went past its memory limit and was not stopped");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::MemoryLimitExceeded");
    CHECK(std::string(e.what()).find("limit of 64 MiB") != std::string::npos);
  }
  auto g = client.submit(herd::TaskOptions{}.memory(64ull << 20).isolated(), touch_mib, std::size_t{512});
  try {
    (void)g.result(60s);
    FAIL("the isolated child went past its memory limit");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::MemoryLimitExceeded");
    CHECK(std::string(e.what()).find("64 MiB") != std::string::npos);
  }
  // Within its limit it runs; the worker goes on.
  auto ok = client.submit(herd::TaskOptions{}.memory(256ull << 20).isolated(), touch_mib, std::size_t{16});
  CHECK(ok.result(60s) == 16);
}

TEST_CASE("Hpc.Preemption.ThreePreemptionsWithNoRetriesFinishExact" * doctest::timeout(180)) {
  // checkpointable(3).retries(0): its worker gets SIGTERM three times (a new worker each time);
  // each drain is a preemption, and the fourth run finishes from the checkpoint.
  constexpr std::int64_t kSteps = 40;
  constexpr int kIntervalMs = 50;
  const std::string dir = temp_dir("preempt");
  herd::LocalCluster cluster{0};
  cluster.env("HERD_TIMEOUT_MS", "3000").env("HERD_HEARTBEAT_MS", "100");
  const std::string address = cluster.start();
  herd::Client client{address};
  std::vector<pid_t> workers{spawn_worker(address, "w1", "slot=1", dir + "/w1.log")};
  client.wait_for_workers(1, 60s);
  auto f = client.submit(herd::TaskOptions{}.key("ckpt").checkpointable(3).retries(0), ckpt_sum, dir, kSteps,
                         kIntervalMs);
  for (int round = 1; round <= 3; ++round) {
    const std::string on = "w" + std::to_string(round);
    // Under way there, then preempted, with a fresh worker to go on.
    REQUIRE(eventually([&] { return count_on(marks(dir + "/ckpt.intervals"), on) >= 3; }, 60s));
    const std::string next = "w" + std::to_string(round + 1);
    workers.push_back(spawn_worker(address, next, "slot=1", dir + "/" + next + ".log"));
    REQUIRE(::kill(workers[static_cast<std::size_t>(round - 1)], SIGTERM) == 0);
  }
  CHECK(f.result(120s) == sum_of_squares(kSteps));
  const auto runs = marks(dir + "/ckpt.runs");
  INFO("runs:\n" << read_file(dir + "/ckpt.runs"));
  REQUIRE(runs.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(runs[static_cast<std::size_t>(i)].worker == "w" + std::to_string(i + 1));
  CHECK(marks(dir + "/ckpt.drained").size() == 3);
  for (std::size_t i = 1; i < runs.size(); ++i) CHECK(runs[i].value > 0);  // resumed, not from scratch
  for (pid_t p : workers) ::kill(p, SIGTERM);
  for (pid_t p : workers) ::waitpid(p, nullptr, 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Hpc.Preemption.AFailureIsNotAPreemption" * doctest::timeout(120)) {
  // checkpointable(3).retries(0) that throws: it fails at once, and the error says its retries
  // are spent.
  const std::string dir = temp_dir("throw");
  herd::Client client{herd::LocalCluster{1}};
  client.wait_for_workers(1, 60s);
  auto f = client.submit(herd::TaskOptions{}.checkpointable(3).retries(0), throws_once, dir + "/marker");
  try {
    (void)f.result(60s);
    FAIL("it should have failed");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "std::runtime_error");
    CHECK(std::string(e.what()).find("retries(0)") != std::string::npos);
  }
  const std::string ran = read_file(dir + "/marker");
  CHECK(std::count(ran.begin(), ran.end(), '\n') == 1);  // ran once
  std::filesystem::remove_all(dir);
}
