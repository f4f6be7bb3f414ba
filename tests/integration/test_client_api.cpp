// Dask's client calls that herd adds for issue 19, against a real LocalCluster (a scheduler
// process and worker processes on loopback): wait(FIRST_COMPLETED | ALL_COMPLETED),
// as_completed that grows while iterating and yields values, done-callbacks, exception().
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <herd/herd.hpp>

using namespace std::chrono_literals;

namespace {
int api_inc(int x) { return x + 1; }
int api_sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
int api_fail(int x) { throw std::invalid_argument("bad input " + std::to_string(x)); }
// Writes `marker` (so the test knows it runs), then never returns: no C++ thread can be stopped.
int api_endless(std::string marker) {
  std::ofstream(marker) << "started";
  for (;;) std::this_thread::sleep_for(50ms);
}
}  // namespace
HERD_TASK(api_inc);
HERD_TASK(api_sleep_ms);
HERD_TASK(api_fail);
HERD_TASK(api_endless);
namespace {
std::string api_whoami() { return herd::this_task().worker; }
}  // namespace
HERD_TASK(api_whoami);
namespace {
// Appends a line to `path`: how often it ran.
int api_mark(std::string path) {
  std::ofstream(path, std::ios::app) << "ran\n";
  return 1;
}
// The same, once `after` is done: a dependency keeps it unstarted in the scheduler till then.
int api_mark_after(int after, std::string path) { return after >= 0 ? api_mark(std::move(path)) : 0; }
}  // namespace
HERD_TASK(api_mark);
HERD_TASK(api_mark_after);
namespace {
std::vector<char> api_bytes(int n) { return std::vector<char>(static_cast<std::size_t>(n), 'b'); }
}  // namespace
HERD_TASK(api_bytes);

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string temp_path(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("herd-api-" + what + "-" + std::to_string(::getpid()) + "-" +
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

/// The pid a shell command wrote to `path` (its own, before exec).
pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

bool gone_within(pid_t pid, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (::kill(pid, 0) != 0) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}
}  // namespace

TEST_CASE("ClientApi.Wait.FirstCompletedReturnsWhileSlowTasksRun" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  std::vector<herd::Future<int>> fs = {client.submit(api_sleep_ms, 8000), client.submit(api_sleep_ms, 8000),
                                       client.submit(api_sleep_ms, 100)};
  const auto t0 = Clock::now();
  auto [done, not_done] = herd::wait(fs, 30s, herd::FIRST_COMPLETED);
  // Returned on the short task, long before the slow ones could end.
  CHECK(seconds_since(t0) < 6.0);
  REQUIRE(done.size() == 1);
  CHECK(done[0].key() == fs[2].key());
  CHECK(done[0].result() == 100);
  REQUIRE(not_done.size() == 2);
  for (const auto& f : not_done) CHECK_FALSE(f.done());
  client.cancel(fs);
}

TEST_CASE("ClientApi.Wait.AllCompletedWithTimeoutSplitsDoneAndNotDone" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<herd::Future<int>> fs = {client.submit(api_sleep_ms, 10), client.submit(api_sleep_ms, 6000)};
  CHECK(fs[0].result() == 10);
  const auto t0 = Clock::now();
  auto partial = herd::wait(fs, 500ms, herd::ALL_COMPLETED);
  const double waited = seconds_since(t0);
  CHECK(waited >= 0.45);  // it did wait for the slow one, up to the limit
  CHECK(waited < 5.0);    // and no longer
  REQUIRE(partial.done.size() == 1);
  CHECK(partial.done[0].key() == fs[0].key());
  REQUIRE(partial.not_done.size() == 1);
  CHECK(partial.not_done[0].key() == fs[1].key());
  fs[1].cancel();
  auto all = herd::wait(fs);  // a cancelled future is done too
  CHECK(all.done.size() == 2);
  CHECK(all.not_done.empty());
  // An empty list is done at once.
  CHECK(herd::wait(std::vector<herd::Future<int>>{}, herd::FIRST_COMPLETED).done.empty());
}

TEST_CASE("ClientApi.AsCompleted.AddWhileIterating" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  // A tree: every value below 6 fans out into two tasks of value + 1. From 3 roots of value 1,
  // 3 * (2^6 - 1) = 189 tasks in all, each yielded once.
  std::vector<herd::Future<int>> roots = {client.submit(api_inc, 0), client.submit(api_inc, 0),
                                          client.submit(api_inc, 0)};
  auto ac = client.as_completed(roots);
  std::map<int, int> by_value;
  std::set<std::string> keys;
  int yielded = 0;
  for (const herd::Future<int>& f : ac) {
    ++yielded;
    keys.insert(f.key());
    const int v = f.result();
    ++by_value[v];
    if (v < 6) {
      ac.add(client.submit(api_inc, f));  // a future argument: the value flows to the child
      ac.add(client.submit(api_inc, v));
    }
  }
  CHECK(yielded == 189);
  CHECK(keys.size() == 189u);
  for (int v = 1; v <= 6; ++v) CHECK(by_value[v] == 3 << (v - 1));
  CHECK(ac.empty());
}

TEST_CASE("ClientApi.AsCompleted.WithResultsYieldsPairs" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<herd::Future<int>> fs;
  for (int i = 0; i < 50; ++i) fs.push_back(client.submit(api_inc, i));
  int n = 0;
  long sum = 0;
  for (auto& [f, value] : client.as_completed(fs).with_results()) {
    CHECK(value == f.result());
    sum += value;
    ++n;
  }
  CHECK(n == 50);
  CHECK(sum == 50 * 51 / 2);

  // A failure is thrown when its turn comes; the iteration goes on after it.
  std::vector<herd::Future<int>> mixed = {client.submit(api_inc, 1), client.submit(api_fail, 7)};
  auto ac = client.as_completed(mixed);
  int ok = 0, failed = 0;
  for (int i = 0; i < 3; ++i) {
    try {
      auto item = ac.next_with_result();
      if (!item) break;
      CHECK(item->second == 2);
      ++ok;
    } catch (const herd::TaskError& e) {
      CHECK(std::string(e.what()).find("bad input 7") != std::string::npos);
      ++failed;
    }
  }
  CHECK(ok == 1);
  CHECK(failed == 1);
  CHECK_FALSE(ac.next().has_value());
}

TEST_CASE("ClientApi.AsCompleted.NextBatchAndTimeout" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::vector<herd::Future<int>> quick;
  for (int i = 0; i < 20; ++i) quick.push_back(client.submit(api_inc, i));
  client.wait(quick);
  auto ac = client.as_completed(quick);
  std::size_t taken = 0;
  while (taken < quick.size()) {
    auto batch = ac.next_batch();
    REQUIRE_FALSE(batch.empty());
    taken += batch.size();
  }
  CHECK(taken == 20u);
  CHECK(ac.next_batch().empty());
  CHECK(ac.next_batch(false).empty());

  auto slow = client.submit(api_sleep_ms, 8000);
  auto timed = client.as_completed(std::vector<herd::Future<int>>{slow}, 400ms);
  const auto t0 = Clock::now();
  CHECK_THROWS_AS(timed.next(), herd::TimeoutError);
  const double waited = seconds_since(t0);
  CHECK(waited >= 0.3);
  CHECK(waited < 5.0);
  CHECK(timed.count() == 1u);  // still watched: nothing was yielded
  slow.cancel();
}

TEST_CASE("ClientApi.Future.AddDoneCallbackRunsOnTheCallbackThread" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::thread::id> threads;
  std::vector<int> values;
  int errors = 0;
  const auto main_id = std::this_thread::get_id();
  auto record = [&](const herd::Future<int>& f) {
    std::lock_guard lock(mu);
    threads.insert(std::this_thread::get_id());
    if (f.exception()) {
      ++errors;
    } else {
      values.push_back(f.result());  // may fetch: allowed on the callback thread
    }
    cv.notify_all();
  };
  std::vector<herd::Future<int>> fs;
  for (int i = 0; i < 30; ++i) fs.push_back(client.submit(api_inc, i));
  for (auto& f : fs) f.add_done_callback(record);
  auto bad = client.submit(api_fail, 1);
  bad.add_done_callback(record);
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return values.size() + errors == 31; }));
  }
  // Added after the future is done: runs too, and on the same thread.
  fs[0].add_done_callback(record);
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return values.size() + errors == 32; }));
    CHECK(errors == 1);
    std::multiset<int> got(values.begin(), values.end());
    for (int i = 1; i <= 30; ++i) CHECK(got.count(i) == (i == 1 ? 2u : 1u));
    CHECK(threads.size() == 1u);
    CHECK(threads.count(main_id) == 0u);
  }

  // A future dropped by its caller lives until its callback ran; a callback that throws is
  // logged, and the next one still runs.
  std::atomic<int> later{0};
  {
    auto f = client.submit(api_sleep_ms, 300);
    f.add_done_callback([](const herd::Future<int>&) { throw std::runtime_error("callback fails"); });
    f.add_done_callback([&](const herd::Future<int>& g) { later += g.result(); });
  }
  const auto t0 = Clock::now();
  while (later.load() == 0 && seconds_since(t0) < 30) std::this_thread::sleep_for(10ms);
  CHECK(later.load() == 300);

  // Still pending at close(): its callback runs before close() returns, with the future lost.
  std::atomic<int> at_close{0};
  auto endless = client.submit(api_sleep_ms, 60000);
  endless.add_done_callback([&](const herd::Future<int>& g) { at_close = g.status() == "lost" ? 1 : 2; });
  client.close();
  CHECK(at_close.load() == 1);
}

TEST_CASE("ClientApi.Future.ExceptionDoesNotThrow" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto fine = client.submit(api_inc, 1);
  auto bad = client.submit(api_fail, 3);
  auto slow = client.submit(api_sleep_ms, 8000);
  CHECK(fine.exception() == nullptr);
  std::exception_ptr e = bad.exception();
  REQUIRE(e != nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const herd::TaskError& err) {
    CHECK(err.type() == "std::invalid_argument");
    CHECK(std::string(err.what()).find("bad input 3") != std::string::npos);
  }
  CHECK_THROWS_AS(slow.exception(200ms), herd::TimeoutError);
  slow.cancel();
  std::exception_ptr c = slow.exception();
  REQUIRE(c != nullptr);
  CHECK_THROWS_AS(std::rethrow_exception(c), herd::CancelledError);
}

TEST_CASE("ClientApi.Timeout.EndlessFunctionFailsAndTheSlotIsFreed" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};  // one worker, one slot
  const std::string marker = temp_path("endless");
  const auto t0 = Clock::now();
  auto endless = client.submit(herd::TaskOptions{}.timeout(1.0), api_endless, marker);
  try {
    endless.result();
    FAIL("expected a TaskError");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::TimeoutError");
    CHECK(std::string(e.what()).find("time limit of 1 s") != std::string::npos);
    CHECK(e.task() == endless.key());
  }
  const double took = seconds_since(t0);
  CHECK(took >= 0.9);
  CHECK(took < 6.0);
  CHECK(std::filesystem::exists(marker));  // it did run
  // The one slot is free again: new tasks run (the endless thread is left behind).
  std::vector<herd::Future<int>> after;
  for (int i = 0; i < 20; ++i) after.push_back(client.submit(api_inc, i));
  CHECK(client.gather(after).back() == 20);
  // A task within its limit is unaffected.
  CHECK(client.submit(herd::TaskOptions{}.timeout(30), api_sleep_ms, 200).result() == 200);
  std::filesystem::remove(marker);
}

TEST_CASE("ClientApi.Timeout.ShellCommandIsKilled" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string pidfile = temp_path("shell-timeout");
  auto cmd = client.submit(herd::TaskOptions{}.timeout(1.5), herd::shell,
                           herd::ShellCommand{"echo $$ > " + pidfile + "; exec sleep 60"});
  REQUIRE(wait_for_file(pidfile, 20s));
  const pid_t pid = read_pid(pidfile);
  REQUIRE(pid > 0);
  CHECK(::kill(pid, 0) == 0);  // running
  CHECK_THROWS_AS(cmd.result(), herd::TaskError);
  CHECK(gone_within(pid, 10s));  // the command was killed, not left to sleep its 60 s
  CHECK(client.submit(api_inc, 1).result() == 2);
  std::filesystem::remove(pidfile);
}

TEST_CASE("ClientApi.Cancel.ForceStopsARunningTask" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string marker = temp_path("force");
  auto endless = client.submit(api_endless, marker);
  REQUIRE(wait_for_file(marker, 20s));  // running on the only slot
  auto queued = client.submit(api_inc, 41);
  CHECK_FALSE(queued.wait_for(300ms));  // the slot is taken
  endless.cancel(true);
  CHECK(endless.status() == "cancelled");
  CHECK_THROWS_AS(endless.result(), herd::CancelledError);
  // The worker stopped waiting for it: the queued task gets the slot.
  CHECK(queued.result(20s) == 42);
  CHECK(client.submit(api_inc, 1).result(20s) == 2);
  std::filesystem::remove(marker);

  // A shell task's command is killed.
  const std::string pidfile = temp_path("force-shell");
  auto cmd = client.submit(herd::shell, herd::ShellCommand{"echo $$ > " + pidfile + "; exec sleep 60"});
  REQUIRE(wait_for_file(pidfile, 20s));
  const pid_t pid = read_pid(pidfile);
  REQUIRE(pid > 0);
  cmd.cancel(true);
  CHECK(gone_within(pid, 10s));
  CHECK(client.submit(api_inc, 2).result(20s) == 3);
  std::filesystem::remove(pidfile);
}

TEST_CASE("ClientApi.Placement.WorkersPoolAndAllowOtherWorkers" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  // The workers' names, as the scheduler reports them.
  std::set<std::string> names;
  for (const auto& w : client.status().workers) names.insert(w.name);
  REQUIRE(names.size() == 3u);
  const std::string chosen = *std::next(names.begin());

  std::vector<herd::Future<std::string>> pinned;
  for (int i = 0; i < 30; ++i) pinned.push_back(client.submit(herd::TaskOptions{}.workers({chosen}), api_whoami));
  for (const auto& w : client.gather(pinned)) CHECK(w == chosen);  // all 30, on that one

  // A worker that is not there: the task waits, saying why; with allow_other_workers it runs.
  auto stuck = client.submit(herd::TaskOptions{}.workers({"no-such-worker"}), api_whoami);
  auto loose = client.submit(herd::TaskOptions{}.workers({"no-such-worker"}).allow_other_workers(), api_whoami);
  CHECK(names.count(loose.result(20s)) == 1u);
  const auto t0 = Clock::now();
  while (stuck.status() == "pending" && seconds_since(t0) < 10) std::this_thread::sleep_for(20ms);
  CHECK(stuck.status() == "no-worker: no connected worker offers a slot among the workers {no-such-worker}");
  CHECK_FALSE(stuck.done());

  // The local cluster's workers are in pool "local": pool("local") runs, pool("gpu") waits.
  CHECK(names.count(client.submit(herd::TaskOptions{}.pool("local"), api_whoami).result(20s)) == 1u);
  auto gpu = client.submit(herd::TaskOptions{}.pool("gpu"), api_whoami);
  const auto t1 = Clock::now();
  while (gpu.status() == "pending" && seconds_since(t1) < 10) std::this_thread::sleep_for(20ms);
  CHECK(gpu.status() == "no-worker: no connected worker offers a slot in pool 'gpu'");
}

TEST_CASE("ClientApi.FireAndForget.RunsAfterTheClientLeaves" * doctest::timeout(60)) {
  herd::Client owner{herd::LocalCluster{1, 1}};  // keeps the scheduler and the worker up
  const std::string kept = temp_path("fire-and-forget"), dropped = temp_path("dropped");
  {
    herd::Client client{owner.scheduler_address()};
    auto blocker = client.submit(api_sleep_ms, 1500);
    // Both wait for the blocker in the scheduler (unstarted) when the client leaves.
    auto plain = client.submit(api_mark_after, blocker, dropped);  // erased with its client
    auto ff = client.submit(api_mark_after, blocker, kept);
    client.fire_and_forget(ff);
    CHECK_FALSE(ff.done());
    client.close();
  }
  // The fire-and-forget task ran once, after its client had gone; the plain one never did.
  REQUIRE(wait_for_file(kept, 30s));
  std::this_thread::sleep_for(500ms);  // time enough for a second run, were there one
  std::ifstream in(kept);
  int runs = 0;
  for (std::string line; std::getline(in, line);) runs += line == "ran" ? 1 : 0;
  CHECK(runs == 1);
  CHECK_FALSE(std::filesystem::exists(dropped));
  // And the scheduler forgot it afterwards: nothing left in its graph but what owner holds.
  const auto t0 = Clock::now();
  std::uint64_t left = 1;
  while (seconds_since(t0) < 10) {
    left = 0;
    for (const auto& [state, n] : owner.status().tasks) left += n;
    if (left == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(left == 0u);
  std::filesystem::remove(kept);
}

// A thread waiting for its future reads the scheduler's socket itself (the round trip's path
// has no hand-off from the client's I/O thread); one thread at a time does, the others wait on
// the condition variable as before, and big results still come through the I/O thread's fetch.
// Four threads, each a loop of submit().result(), with values checked: none hangs, none gets
// another's value.
TEST_CASE("ClientApi.Threads.WaitingThreadsReadForEachOther" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{2}};
  constexpr int kThreads = 4, kRounds = 300;
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int x = t * 100000 + i;
        if (client.submit(api_inc, x).result() != x + 1) ++wrong;
        // Now and then a wait with a timeout, and one that is already done.
        if (i % 50 == 0) {
          auto f = client.submit(api_inc, x);
          if (!f.wait_for(30s) || f.result() != x + 1 || f.result() != x + 1) ++wrong;
        }
      }
      ++done;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(done.load() == kThreads);
  CHECK(wrong.load() == 0);
  // A result too big to travel with its update is fetched from the worker by the I/O thread,
  // while this thread waits reading the socket.
  for (int n : {1 << 20, 9 << 20}) {
    const std::vector<char> big = client.submit(api_bytes, n).result();
    REQUIRE(big.size() == static_cast<std::size_t>(n));
    CHECK(big.front() == 'b');
    CHECK(big.back() == 'b');
  }
}

namespace {
// Voluntary context switches of all of this process's threads so far: how often they slept.
long voluntary_switches() {
  long total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stol(line.substr(24));
    }
  }
  return total;
}
}  // namespace

// A thread waiting long for a future costs the client no wake-ups beyond the heartbeats: the
// I/O thread, which looks every 2 ms while waits are short (a loop of round trips), sleeps at
// the heartbeat once a wait passes 20 ms (a client waiting hours on a login node shared with
// others), and the result still arrives at once.
TEST_CASE("ClientApi.Wait.LongWaitIsQuiet" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  CHECK(client.submit(api_inc, 1).result() == 2);
  auto f = client.submit(api_sleep_ms, 2000);
  const long before = voluntary_switches();
  const auto t0 = Clock::now();
  CHECK(f.result() == 2000);
  const double waited = seconds_since(t0);
  const long slept = voluntary_switches() - before;
  MESSAGE("waited " << waited << " s; the client's threads slept " << slept << " times");
  CHECK(waited < 3.0);
  CHECK(slept < 100);  // every 2 ms would be ~1,000
}
