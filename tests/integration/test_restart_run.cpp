// Client::restart() and Client::run() (issue 19, Dask's Client.restart / Client.run) against a
// real LocalCluster: a scheduler process and worker processes on loopback, workers replaced
// through the scheduler's pool.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;

namespace {
int rr_pid() { return static_cast<int>(::getpid()); }
std::string rr_whoami() { return herd::this_task().worker; }
int rr_inc(int x) { return x + 1; }
int rr_sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
// Writes `marker`, then never returns: a C++ thread cannot be stopped.
int rr_endless(std::string marker) {
  std::ofstream(marker) << "started";
  for (;;) std::this_thread::sleep_for(50ms);
}
// The worker process dies under the call.
int rr_die() { ::_exit(3); }
// Appends a line to `path`: how often it ran.
int rr_mark(std::string path) {
  std::ofstream(path, std::ios::app) << "ran\n";
  return 7;
}
}  // namespace
HERD_TASK(rr_pid);
HERD_TASK(rr_whoami);
HERD_TASK(rr_inc);
HERD_TASK(rr_sleep_ms);
HERD_TASK(rr_endless);
HERD_TASK(rr_die);
HERD_TASK(rr_mark);

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string temp_path(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("herd-rr-" + what + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(Clock::now().time_since_epoch().count())))
      .string();
}

bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    std::ifstream in(path);
    std::string word;
    if (in >> word) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// The process is gone: no such pid, or a zombie its parent has not reaped yet.
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool all_gone_within(const std::map<std::string, int>& pids, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    bool all = true;
    for (const auto& [name, pid] : pids) all = all && process_gone(pid);
    if (all) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

/// The message of the CancelledError result() throws ("" when it throws none or another).
template <typename T>
std::string cancel_message(const herd::Future<T>& f) {
  try {
    (void)f.result(10s);
  } catch (const herd::CancelledError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("other error: ") + e.what();
  }
  return "no error";
}

bool known_within(const herd::Client& c, const herd::Future<int>& f, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (c.explain(f).found) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

herd::ClientOptions named(const std::string& name) {
  herd::ClientOptions o;
  o.name = name;
  return o;
}
}  // namespace

TEST_CASE("Restart.LocalCluster.CancelsEveryFutureReplacesTheWorkersAndServesAtOnce" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{2}, named("restarter")};
  herd::Client other{client.scheduler_address(), named("bystander")};
  const std::map<std::string, int> before = client.run(rr_pid);
  REQUIRE(before.size() == 2);

  auto finished = client.submit(rr_inc, 1);
  REQUIRE(finished.result(30s) == 2);
  auto theirs_done = other.submit(rr_inc, 10);
  REQUIRE(theirs_done.result(30s) == 11);
  std::vector<herd::Future<int>> running;  // both slots busy, two more queued
  for (int i = 0; i < 4; ++i) running.push_back(client.submit(rr_sleep_ms, 60000));
  auto theirs = other.submit(rr_sleep_ms, 60000);
  // The scheduler knows them all before the restart (each client sends on its own thread: a
  // task that reaches the scheduler after the restart is a new task, as in Dask).
  REQUIRE(known_within(other, theirs, 10s));
  for (auto& f : running) REQUIRE(known_within(client, f, 10s));

  const auto t0 = Clock::now();
  client.restart(60s);
  const double took = seconds_since(t0);
  MESSAGE("restart of 2 local workers took " << took << " s");

  // Every old future of both clients: cancelled, with the reason, finished ones too.
  const std::string why = "cancelled: the cluster was restarted by client restarter";
  CHECK(finished.status() == "cancelled");
  CHECK(cancel_message(finished).find("cancelled: the cluster was restarted") != std::string::npos);
  for (auto& f : running) {
    CHECK(f.status() == "cancelled");
    CHECK(cancel_message(f).find("cancelled: the cluster was restarted") != std::string::npos);
  }
  CHECK(theirs.wait_for(10s));
  CHECK(theirs.status() == "cancelled");
  CHECK(cancel_message(theirs) == "task " + theirs.key() + " " + why);
  CHECK(theirs_done.wait_for(10s));
  CHECK(cancel_message(theirs_done) == "task " + theirs_done.key() + " " + why);

  // The old worker processes are gone; new ones serve, as many as before.
  CHECK(all_gone_within(before, 15s));
  const auto t1 = Clock::now();
  CHECK(client.submit(rr_inc, 41).result(10s) == 42);  // at once: the workers are connected
  CHECK(seconds_since(t1) < 5.0);
  CHECK(other.submit(rr_inc, 1).result(10s) == 2);
  const std::map<std::string, int> after = client.run(rr_pid);
  CHECK(after.size() == 2);
  for (const auto& [name, pid] : after) {
    CHECK(before.count(name) == 0);
    for (const auto& [old_name, old_pid] : before) CHECK(pid != old_pid);
  }
  // The scheduler forgot every old task: only what was submitted since is in its graph.
  const herd::ClusterStatus st = client.status();
  CHECK(st.workers.size() == 2);
  std::uint64_t in_graph = 0;
  for (const auto& [state, n] : st.tasks) in_graph += n;
  CHECK(in_graph <= 4);  // the two incs and the two run() calls after the restart, at most
}

TEST_CASE("Restart.LocalCluster.AWorkerStuckInAnEndlessTaskIsReplaced" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{1}};
  const std::map<std::string, int> before = client.run(rr_pid);
  REQUIRE(before.size() == 1);
  const std::string marker = temp_path("endless");
  auto endless = client.submit(rr_endless, marker);
  REQUIRE(wait_for_file(marker, 30s));
  const auto t0 = Clock::now();
  client.restart(60s);
  const double took = seconds_since(t0);
  MESSAGE("restart with a stuck worker took " << took << " s");
  CHECK(took < 20.0);
  CHECK(endless.status() == "cancelled");
  CHECK(all_gone_within(before, 15s));
  const std::map<std::string, int> after = client.run(rr_pid);
  REQUIRE(after.size() == 1);
  CHECK(after.begin()->second != before.begin()->second);
  CHECK(client.submit(rr_inc, 1).result(10s) == 2);
  std::filesystem::remove(marker);
}

TEST_CASE("Restart.LocalCluster.TimeoutErrorSaysHowManyCameBack" * doctest::timeout(120)) {
  // A restart that gives the new workers no time: the tasks are cancelled all the same, the
  // error names the count, and the workers come back afterwards.
  herd::Client client{herd::LocalCluster{2}};
  auto f = client.submit(rr_sleep_ms, 60000);
  std::string what;
  try {
    client.restart(0ms);
  } catch (const herd::TimeoutError& e) {
    what = e.what();
  }
  CHECK(what.find("of 2 workers came back within 0 ms") != std::string::npos);
  CHECK(f.status() == "cancelled");
  client.wait_for_workers(2, 60s);
  CHECK(client.submit(rr_inc, 2).result(30s) == 3);
}

int lines_in(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST_CASE("Restart.LocalCluster.JournaledResultsAreNotReusedAfterIt" * doctest::timeout(120)) {
  // With a journal, a keyed task submitted again reuses its recorded result; after a restart
  // it runs again: the restart forgot the journal's results, also for a scheduler that loads
  // the file later (results recorded after the restart stay).
  const std::string journal = temp_path("journal"), before = temp_path("before"), after = temp_path("after");
  const auto key_before = herd::TaskOptions{}.key("rr-before"), key_after = herd::TaskOptions{}.key("rr-after");
  {
    herd::Client client{herd::LocalCluster{1}.env("HERD_JOURNAL", journal)};
    CHECK(client.submit(key_before, rr_mark, before).result(30s) == 7);
    CHECK(client.submit(key_before, rr_mark, before).result(30s) == 7);  // from the journal
    CHECK(lines_in(before) == 1);
    client.restart(60s);
    CHECK(client.submit(key_before, rr_mark, before).result(30s) == 7);  // computed again
    CHECK(lines_in(before) == 2);
    CHECK(client.submit(key_after, rr_mark, after).result(30s) == 7);
    CHECK(lines_in(after) == 1);
  }
  {
    herd::Client client{herd::LocalCluster{1}.env("HERD_JOURNAL", journal)};
    CHECK(client.submit(key_after, rr_mark, after).result(30s) == 7);  // recorded after: reused
    CHECK(lines_in(after) == 1);
    client.restart(60s);
    CHECK(client.submit(key_after, rr_mark, after).result(30s) == 7);
    CHECK(lines_in(after) == 2);
  }
  {
    herd::Client client{herd::LocalCluster{1}.env("HERD_JOURNAL", journal)};
    // rr-before was recorded between the restarts: forgotten by the second one, it runs.
    CHECK(client.submit(key_before, rr_mark, before).result(30s) == 7);
    CHECK(lines_in(before) == 3);
    // rr-after was recorded again after the second restart: reused.
    CHECK(client.submit(key_after, rr_mark, after).result(30s) == 7);
    CHECK(lines_in(after) == 2);
  }
  for (const auto& p : {journal, journal + ".lock", before, after}) std::filesystem::remove(p);
}

TEST_CASE("Restart.HandConnectedWorker.IsStoppedAndNotWaitedFor" * doctest::timeout(120)) {
  // A worker started by hand has no pool to replace it: told to stop, it exits; restart()
  // waits only for the pool's worker.
  herd::LocalCluster cluster{1};
  const std::string address = cluster.start();
  const std::string log = temp_path("by-hand") + ".log";
  const pid_t by_hand = herd::testing::spawn_worker(address, "by-hand", "x=1", log);
  herd::Client client{address};
  client.wait_for_workers(2, 30s);
  REQUIRE(client.run(herd::RunOn{"by-hand"}, rr_pid).at("by-hand") == by_hand);
  const auto t0 = Clock::now();
  client.restart(60s);
  CHECK(seconds_since(t0) < 20.0);
  int status = -1;
  pid_t reaped = 0;
  while (reaped == 0 && seconds_since(t0) < 15.0) {
    reaped = ::waitpid(by_hand, &status, WNOHANG);
    if (reaped == 0) std::this_thread::sleep_for(20ms);
  }
  CHECK(reaped == by_hand);  // it left on its own
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  if (reaped != by_hand) {
    ::kill(by_hand, SIGKILL);
    ::waitpid(by_hand, nullptr, 0);
  }
  const herd::ClusterStatus st = client.status();
  REQUIRE(st.workers.size() == 1);
  CHECK(st.workers[0].name != "by-hand");
  CHECK(client.submit(rr_inc, 1).result(10s) == 2);
  std::filesystem::remove(log);
}

TEST_CASE("Run.LocalCluster.OneResultPerWorkerByName" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{3}};
  const herd::ClusterStatus st = client.status();
  REQUIRE(st.workers.size() == 3);
  std::set<std::string> names;
  for (const auto& w : st.workers) names.insert(w.name);

  const std::map<std::string, std::string> who = client.run(rr_whoami);
  CHECK(who.size() == 3);
  for (const auto& [name, ran_on] : who) {
    CHECK(names.count(name) == 1);
    CHECK(ran_on == name);  // each call ran on the worker it is listed under
  }
  const std::map<std::string, int> pids = client.run(rr_pid);
  std::set<int> distinct;
  for (const auto& [name, pid] : pids) distinct.insert(pid);
  CHECK(pids.size() == 3);
  CHECK(distinct.size() == 3);
  const std::map<std::string, int> plus = client.run(rr_inc, 5);
  CHECK(plus.size() == 3);
  for (const auto& [name, v] : plus) CHECK(v == 6);

  // A chosen subset, by name.
  const std::string first = *names.begin(), last = *names.rbegin();
  const std::map<std::string, std::string> some = client.run(herd::RunOn{first, last}, rr_whoami);
  CHECK(some.size() == 2);
  CHECK(some.at(first) == first);
  CHECK(some.at(last) == last);
  // A name no worker has: a clear error naming it, before anything runs.
  try {
    (void)client.run(herd::RunOn{"no-such-worker"}, rr_pid);
    FAIL("run on an unknown worker did not throw");
  } catch (const herd::Error& e) {
    CHECK(std::string(e.what()).find("'no-such-worker'") != std::string::npos);
  }
  // Busy slots: the call waits for one (it runs in a slot), then runs first.
  std::vector<herd::Future<int>> busy;
  for (int i = 0; i < 3; ++i) busy.push_back(client.submit(rr_sleep_ms, 500));
  const std::map<std::string, int> again = client.run(rr_pid);
  CHECK(again == pids);
  for (auto& b : busy) CHECK(b.result(30s) == 500);
}

TEST_CASE("Run.LocalCluster.AWorkerThatDiesFailsWithItsName" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{2}};
  const herd::ClusterStatus st = client.status();
  REQUIRE(st.workers.size() == 2);
  const std::string victim = st.workers[0].name;
  const auto t0 = Clock::now();
  std::string what;
  try {
    (void)client.run(herd::RunOn{victim}, rr_die);
  } catch (const herd::WorkerLostError& e) {
    what = e.what();
  }
  CHECK(what.find("worker " + victim + " left") != std::string::npos);
  CHECK(seconds_since(t0) < 30.0);
  // The other worker (and the pool's replacement) still serve.
  client.wait_for_workers(2, 60s);
  CHECK(client.run(rr_inc, 1).size() == 2);
}
