// Control links (net/link.hpp) between real scheduler and worker processes: they come
// up for every worker, a cut one loses no task (each task's runs counted in a marker file), and
// HERD_LINKS=0 keeps everything on ZeroMQ.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;

namespace {

/// Appends "<i>" to `marker` as it starts, then takes `ms`: how often each task ran.
int counted_square(std::string marker, int i, int ms) {
  std::ofstream(marker, std::ios::app) << i << "\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return i * i;
}
HERD_TASK(counted_square);

/// The scheduler's established TCP connections, by local port ("ss" sees every process's).
std::multiset<int> scheduler_ports(int pid) {
  const std::string out = herd::testing::run_command("ss -Htnp state established 2>/dev/null");
  std::multiset<int> ports;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("pid=" + std::to_string(pid) + ",") == std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(\s(\S+):(\d+)\s+\S+:\d+\s)"))) ports.insert(std::stoi(m[2]));
  }
  return ports;
}

/// The port the scheduler's log names for its control links (0: none).
int link_port(const std::string& log) {
  std::smatch m;
  const std::string text = herd::testing::read_file(log);
  if (std::regex_search(text, m, std::regex(R"(control links at port (\d+))"))) return std::stoi(m[1]);
  return 0;
}

std::map<int, int> runs_by_task(const std::string& marker) {
  std::map<int, int> runs;
  std::istringstream in(herd::testing::read_file(marker));
  for (int i; in >> i;) ++runs[i];
  return runs;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/herd-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("Links.Cut.MidStreamLosesNoTaskAndTheWorkersAreReplaced" * doctest::timeout(120)) {
  const std::string dir = fresh_dir("links-cut");
  const std::string marker = dir + "/runs";
  herd::LocalCluster cluster{2};
  cluster.log_directory(dir).env("HERD_HEARTBEAT_MS", "200").env("HERD_TIMEOUT_MS", "4000").env("HERD_LOG_LEVEL", "info");
  const std::string address = cluster.start();
  herd::Client client{address};
  client.wait_for_workers(2, 30s);
  const int sched = cluster.scheduler_pid();
  const std::string log = dir + "/scheduler.log";
  const int port = link_port(log);
  REQUIRE_MESSAGE(port > 0, herd::testing::read_file(log));
  // Both workers' links up: the scheduler holds two connections on that port, and says so.
  REQUIRE_MESSAGE(herd::testing::eventually([&] { return scheduler_ports(sched).count(port) == 2; }, 20s),
                  herd::testing::run_command("ss -Htnp"));
  REQUIRE(herd::testing::eventually([&] {
    const auto st = client.status();
    return st.workers.size() == 2 && st.workers[0].link && st.workers[1].link;
  }, 20s));
  std::vector<herd::Future<int>> futures;
  constexpr int kTasks = 16;
  for (int i = 0; i < kTasks; ++i) futures.push_back(client.submit(counted_square, marker, i, 300));
  // Some have started, none can have finished everything: cut both links (the kernel resets
  // them, as a failing switch or a firewall's reset would).
  REQUIRE(herd::testing::eventually([&] { return runs_by_task(marker).size() >= 2; }, 20s));
  const std::string killed = herd::testing::run_command("ss -HK state established '( sport = :" + std::to_string(port) + " )' 2>&1");
  MESSAGE("cut: " << killed);
  for (int i = 0; i < kTasks; ++i) CHECK(futures[i].result(60s) == i * i);
  const auto runs = runs_by_task(marker);
  CHECK(runs.size() == static_cast<std::size_t>(kTasks));
  int twice = 0;
  for (const auto& [task, n] : runs) {
    CHECK(n >= 1);
    CHECK(n <= 2);  // at most its run cut short, then the one that finished
    twice += n == 2 ? 1 : 0;
  }
  MESSAGE(twice << " of " << kTasks << " tasks ran again after the cut");
  const std::string said = herd::testing::read_file(log);
  CHECK(said.find("its control link broke") != std::string::npos);
  // The pool replaced them, and the new workers have links again.
  CHECK(herd::testing::eventually([&] { return scheduler_ports(sched).count(port) == 2; }, 30s));
  CHECK(herd::testing::eventually([&] {
    const auto st = client.status();
    return st.workers.size() == 2 && st.workers[0].link && st.workers[1].link;
  }, 30s));
  std::filesystem::remove_all(dir);
}

TEST_CASE("Links.Off.EverythingStaysOnZeroMq" * doctest::timeout(60)) {
  const std::string dir = fresh_dir("links-off");
  herd::LocalCluster cluster{2};
  cluster.log_directory(dir).env("HERD_LINKS", "0").env("HERD_LOG_LEVEL", "info");
  const std::string address = cluster.start();
  herd::Client client{address};
  client.wait_for_workers(2, 30s);
  const std::string log = dir + "/scheduler.log";
  std::vector<herd::Future<int>> futures;
  for (int i = 0; i < 20; ++i) futures.push_back(client.submit(counted_square, dir + "/runs", i, 0));
  for (int i = 0; i < 20; ++i) CHECK(futures[i].result(30s) == i * i);
  CHECK(link_port(log) == 0);
  for (const auto& w : client.status().workers) CHECK_FALSE(w.link);
  // Only the ROUTER's connections (one port) on the scheduler's side.
  const auto ports = scheduler_ports(cluster.scheduler_pid());
  CHECK(std::set<int>(ports.begin(), ports.end()).size() == 1);
  std::filesystem::remove_all(dir);
}
