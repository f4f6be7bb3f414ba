// Detached campaigns (issue 20) against real processes: a scheduler with local workers that
// outlives its clients; a client in a child process submits a campaign and is SIGKILLed
// mid-way; a new client reattaches by name, gathers every value (nothing computed twice: each
// task leaves one marker line), sees the failing task's error, and releases the campaign.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;
using herd::testing::eventually;
using herd::testing::read_file;
using herd::testing::run_command;

namespace {

/// One step of the campaign: leaves a marker line in `dir`/`i` (how often it ran), takes a
/// while, and returns i*i; step 5 diverges.
int camp_step(int i, std::string dir) {
  std::ofstream(dir + "/" + std::to_string(i), std::ios::app) << "ran\n";
  std::this_thread::sleep_for(250ms);
  if (i == 5) throw std::runtime_error("step 5 diverged");
  return i * i;
}

std::size_t lines_in(const std::string& path) {
  const std::string text = read_file(path);
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

const herd::CampaignInfo* find_campaign(const std::vector<herd::CampaignInfo>& all, const std::string& name) {
  for (const auto& c : all) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

constexpr int kTasks = 12;

/// The child: connects, submits the campaign, drops half of its futures (released), tells the
/// parent once the scheduler holds every task, and waits to be killed.
[[noreturn]] void child_submitter(int address_fd, int ready_fd, const std::string& dir) {
  try {
    char buf[256] = {};
    const ssize_t n = ::read(address_fd, buf, sizeof buf - 1);
    if (n <= 0) ::_exit(2);
    herd::Client client{std::string(buf, static_cast<std::size_t>(n))};
    std::vector<int> steps;
    for (int i = 0; i < kTasks; ++i) steps.push_back(i);
    auto futures = client.map(herd::TaskOptions{}.campaign("nightly"), camp_step, steps,
                              std::vector<std::string>(kTasks, dir));
    futures.resize(kTasks / 2);  // dropped: the scheduler is told to release them
    // Every task is with the scheduler once the campaign lists them all (the request goes
    // after the submissions).
    for (;;) {
      const auto all = client.campaigns();
      const herd::CampaignInfo* c = find_campaign(all, "nightly");
      if (c != nullptr && c->total == kTasks) break;
      std::this_thread::sleep_for(20ms);
    }
    (void)!::write(ready_fd, "r", 1);
    for (;;) ::pause();
  } catch (...) {
    ::_exit(3);
  }
}

}  // namespace
HERD_TASK(camp_step);

TEST_CASE("Campaign.Local.ClientKilledThenReattachedByName" * doctest::timeout(120)) {
  const std::string dir = "/tmp/herd-campaign-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // The child is forked before this process starts any thread or ZeroMQ context.
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    child_submitter(to_child[0], from_child[1], dir);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);

  herd::LocalCluster cluster{2};
  cluster.env("HERD_TIMEOUT_MS", "3000");  // the killed client is noticed within 3 s
  const std::string address = cluster.start();
  REQUIRE(::write(to_child[1], address.data(), address.size()) == static_cast<ssize_t>(address.size()));
  ::close(to_child[1]);
  char ready = 0;
  REQUIRE(::read(from_child[0], &ready, 1) == 1);
  ::close(from_child[0]);

  {
    // A watcher: the client is killed mid-way, once some steps are done and some are not.
    herd::Client watcher{address};
    herd::CampaignInfo seen;
    REQUIRE(eventually([&] {
      const auto all = watcher.campaigns();
      const herd::CampaignInfo* c = find_campaign(all, "nightly");
      if (c == nullptr) return false;
      seen = *c;
      return c->done >= 2;
    }, 30s));
    CHECK(seen.pending > 0);  // killed mid-way
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    // The scheduler notices the silent client and keeps the campaign, detached.
    CHECK(eventually([&] {
      const auto all = watcher.campaigns();
      const herd::CampaignInfo* c = find_campaign(all, "nightly");
      return c != nullptr && c->client.empty();
    }, 20s));
    // `herd status` lists it.
    int rc = -1;
    const std::string text = run_command(std::string(HERD_CLI_PATH) + " status --scheduler " + address, &rc);
    CHECK(rc == 0);
    CHECK(text.find("campaigns:") != std::string::npos);
    CHECK(text.find("nightly") != std::string::npos);
    const std::string json = run_command(std::string(HERD_CLI_PATH) + " status --json --scheduler " + address, &rc);
    CHECK(json.find("\"campaigns\":[{") != std::string::npos);
  }

  herd::Client client{address};
  const auto futures = client.campaign_futures<int>("nightly");
  REQUIRE(futures.size() == kTasks);
  for (int i = 0; i < kTasks; ++i) {
    const auto& f = futures[static_cast<std::size_t>(i)];
    if (i == 5) {
      try {
        (void)f.result();
        FAIL("step 5 should have failed");
      } catch (const herd::TaskError& e) {
        CHECK(e.type() == "std::runtime_error");
        CHECK(e.message() == "step 5 diverged");
      }
      continue;
    }
    CHECK(f.result() == i * i);
  }
  // Nothing ran twice: the killed client's tasks were neither dropped nor run again.
  for (int i = 0; i < kTasks; ++i) CHECK_MESSAGE(lines_in(dir + "/" + std::to_string(i)) == 1, "step " << i);
  auto all = client.campaigns();
  const herd::CampaignInfo* c = find_campaign(all, "nightly");
  REQUIRE(c != nullptr);
  CHECK(c->total == kTasks);
  CHECK(c->done == kTasks - 1);
  CHECK(c->failed == 1);
  CHECK(c->pending == 0);
  CHECK_FALSE(c->client.empty());  // attached to this client now

  // Attaching again gives the same futures' values.
  CHECK(client.gather(std::vector<herd::Future<int>>{client.campaign_futures<int>("nightly")[3]}).at(0) == 9);

  client.release_campaign("nightly");
  CHECK(find_campaign(client.campaigns(), "nightly") == nullptr);
  CHECK_THROWS_AS(client.campaign_futures<int>("nightly"), herd::Error);
  CHECK_THROWS_AS(client.release_campaign("nightly"), herd::Error);
  // Values already gathered stay.
  CHECK(futures[2].result() == 4);
  std::filesystem::remove_all(dir);
}

namespace {
/// The campaign's last task: needs two of its steps.
int camp_total(int first, int last, std::string dir) {
  std::ofstream(dir + "/total", std::ios::app) << "ran\n";
  return first + last;
}
}  // namespace
HERD_TASK(camp_total);

TEST_CASE("Campaign.Local.SchedulerKilledRestartedOnItsJournalThenReattached" * doctest::timeout(120)) {
  // A campaign runs on a scheduler with a journal; the scheduler is SIGKILLed mid-way (the
  // login node rebooted). A new scheduler on the same journal restores the campaign: what had
  // finished is not run again, what had not runs again from its recipe (the last task's inputs
  // found by key), the failed step keeps its own error; a new client attaches by name and
  // gathers every value.
  const std::string dir = "/tmp/herd-campaign-restart-" + std::to_string(::getpid());
  const std::string journal = dir + ".journal";
  std::filesystem::remove_all(dir);
  std::filesystem::remove(journal);
  std::filesystem::create_directories(dir);
  auto fast = [&] {
    return std::move(herd::LocalCluster{2}.env("HERD_JOURNAL", journal).env("HERD_TIMEOUT_MS", "1500").env(
        "HERD_HEARTBEAT_MS", "100"));
  };
  std::vector<int> finished_before;  // steps whose result the first client held
  {
    herd::LocalCluster cluster = fast();
    const std::string address = cluster.start();
    herd::Client client{address};
    std::vector<int> steps;
    for (int i = 0; i < kTasks; ++i) steps.push_back(i);
    auto futures = client.map(herd::TaskOptions{}.campaign("nightly"), camp_step, steps,
                              std::vector<std::string>(kTasks, dir));
    auto total = client.submit(herd::TaskOptions{}.campaign("nightly"), camp_total, futures[0], futures[kTasks - 1], dir);
    for (int i = 0; i < 3; ++i) {
      CHECK(futures[static_cast<std::size_t>(i)].result(30s) == i * i);
      finished_before.push_back(i);
    }
    ::kill(cluster.scheduler_pid(), SIGKILL);
    CHECK_THROWS_AS(total.result(30s), herd::ConnectionError);
  }
  std::size_t runs_before = 0;
  for (int i = 0; i < kTasks; ++i) runs_before += lines_in(dir + "/" + std::to_string(i));
  CHECK(runs_before < kTasks);  // killed mid-way

  herd::LocalCluster cluster = fast();
  const std::string address = cluster.start();
  herd::Client client{address};
  const auto all = client.campaigns();
  const herd::CampaignInfo* c = find_campaign(all, "nightly");
  REQUIRE(c != nullptr);
  CHECK(c->total == kTasks + 1);
  // The journaled results are put on workers as they connect.
  CHECK(eventually([&] {
    const auto now = client.campaigns();
    const herd::CampaignInfo* n = find_campaign(now, "nightly");
    return n != nullptr && n->done >= 3;
  }, 30s));
  const auto futures = client.campaign_futures<int>("nightly");
  REQUIRE(futures.size() == kTasks + 1);
  for (int i = 0; i < kTasks; ++i) {
    const auto& f = futures[static_cast<std::size_t>(i)];
    if (i == 5) {
      try {
        (void)f.result(60s);
        FAIL("step 5 should have failed");
      } catch (const herd::TaskError& e) {
        CHECK(e.type() == "std::runtime_error");  // its own error, not LostInRestart
        CHECK(e.message() == "step 5 diverged");
      }
      continue;
    }
    CHECK_MESSAGE(f.result(60s) == i * i, "step " << i);
  }
  CHECK(futures[kTasks].result(60s) == 0 + (kTasks - 1) * (kTasks - 1));
  // What had finished ran once; every other step ran at least once, and at most twice (those
  // running or queued on a worker when the scheduler died: the workers go on until they find
  // the scheduler silent, and those results are lost with it).
  std::size_t runs = 0, twice = 0;
  for (int i = 0; i < kTasks; ++i) {
    const std::size_t n = lines_in(dir + "/" + std::to_string(i));
    CHECK_MESSAGE(n >= 1, "step " << i);
    CHECK_MESSAGE(n <= 2, "step " << i);
    runs += n;
    twice += n == 2;
  }
  for (int i : finished_before) CHECK_MESSAGE(lines_in(dir + "/" + std::to_string(i)) == 1, "step " << i);
  CHECK(lines_in(dir + "/total") == 1);
  MESSAGE(runs_before << " step runs before the kill, " << runs << " in all (" << kTasks << " steps, " << twice
                      << " ran twice)");
  const auto after = client.campaigns();
  c = find_campaign(after, "nightly");
  REQUIRE(c != nullptr);
  CHECK(c->done == kTasks);
  CHECK(c->failed == 1);
  CHECK(c->pending == 0);
  client.release_campaign("nightly");
  CHECK(find_campaign(client.campaigns(), "nightly") == nullptr);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(journal);
  std::filesystem::remove(journal + ".lock");
}
