// Tasks that submit tasks (issue 19), against a real LocalCluster: herd::get_client() inside a
// task, and herd::secede() / rejoin() so that a task waiting on the tasks it fanned out gives its
// slot back instead of deadlocking a worker whose every slot is such a waiter.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

using namespace std::chrono_literals;

namespace {
int nest_square(int x) { return x * x; }
std::string nest_where(int) { return herd::this_task().worker + ":" + std::to_string(::getpid()); }

/// Fans out n squares through the worker's client, waits for them without its slot, rejoins.
long nest_fan_out(int n) {
  herd::Client& client = herd::get_client();
  std::vector<int> in(static_cast<std::size_t>(n));
  std::iota(in.begin(), in.end(), 0);
  auto futures = client.map(nest_square, in);
  herd::secede();
  const std::vector<int> out = client.gather(futures);
  herd::rejoin();
  return std::accumulate(out.begin(), out.end(), 0L);
}

/// A binary tree of tasks `depth` deep, each inner one waiting (seceded) for its two children:
/// 2^depth leaves, 2^depth - 1 waiters at once at the deepest point.
long nest_tree(int depth) {
  if (depth == 0) return 1;
  herd::Client& client = herd::get_client();
  auto left = client.submit(nest_tree, depth - 1);
  auto right = client.submit(nest_tree, depth - 1);
  herd::secede();
  const long sum = left.result() + right.result();
  herd::rejoin();
  return sum;
}

/// Where its children ran (worker name and process), after it rejoined.
std::vector<std::string> nest_children_where(int n) {
  herd::Client& client = herd::get_client();
  std::vector<int> in(static_cast<std::size_t>(n));
  auto futures = client.map(nest_where, in);
  herd::secede();
  auto out = client.gather(futures);
  herd::rejoin();
  out.push_back(herd::this_task().worker + ":" + std::to_string(::getpid()));
  return out;
}

/// secede() twice and rejoin() twice are harmless; rejoin() without secede() returns at once.
int nest_twice(int x) {
  herd::rejoin();
  herd::secede();
  herd::secede();
  herd::rejoin();
  herd::rejoin();
  return x + 1;
}

}  // namespace
HERD_TASK(nest_square);
HERD_TASK(nest_where);
HERD_TASK(nest_fan_out);
HERD_TASK(nest_tree);
HERD_TASK(nest_children_where);
HERD_TASK(nest_twice);

namespace {
/// The worker's thread slots as the scheduler counts them come back to `n` (a seceded task's
/// extra slot goes when it rejoins or ends; the status is a snapshot, so it is polled).
bool eventually_threads(herd::Client& client, int n) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  int total = -1;
  while (std::chrono::steady_clock::now() < until) {
    total = 0;
    for (const auto& w : client.status().workers) total += w.nthreads;
    if (total == n) return true;
    std::this_thread::sleep_for(50ms);
  }
  MESSAGE("slots counted: " << total << ", expected " << n);
  return false;
}
}  // namespace

TEST_CASE("Nested.Secede.FanOutOnAOneSlotWorkerFinishes" * doctest::timeout(120)) {
  // One worker, one slot: the fan-out task holds it until it secedes; then its 100 children run
  // there, one by one, and it takes the slot back to return.
  herd::Client client{herd::LocalCluster{1, 1}};
  long expect = 0;
  for (long i = 0; i < 100; ++i) expect += i * i;
  CHECK(client.submit(nest_fan_out, 100).result(60s) == expect);
  // And again, two at once: both wait without a slot, their 2 x 50 children share the one.
  auto a = client.submit(nest_fan_out, 50);
  auto b = client.submit(nest_fan_out, 50);
  long expect50 = 0;
  for (long i = 0; i < 50; ++i) expect50 += i * i;
  CHECK(a.result(60s) == expect50);
  CHECK(b.result(60s) == expect50);
  // The cluster is back to its one slot: the scheduler counts no thread of a task that ended.
  CHECK(client.submit(nest_square, 7).result(30s) == 49);
  CHECK(eventually_threads(client, 1));
}

TEST_CASE("Nested.Secede.TreeOfWaitersOnOneSlot" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  CHECK(client.submit(nest_tree, 4).result(60s) == 16);  // 15 waiters, 16 leaves, one slot
}

TEST_CASE("Nested.GetClient.ChildrenRunOnTheClustersWorkers" * doctest::timeout(120)) {
  // Two workers of two slots each: the children of a task run on the cluster's workers (both
  // may serve), through the same scheduler, and the parent gets their values.
  herd::Client client{herd::LocalCluster{2, 2}};
  const auto where = client.submit(nest_children_where, 40).result(60s);
  REQUIRE(where.size() == 41);
  std::set<std::string> pids;
  for (const auto& w : where) pids.insert(w.substr(w.find(':') + 1));
  CHECK(pids.size() >= 1);
  CHECK(pids.size() <= 2);  // the cluster's two worker processes, nothing else
  // Several parents at once, each with its own children, on every slot.
  std::vector<herd::Future<long>> parents;
  for (int i = 0; i < 6; ++i) parents.push_back(client.submit(nest_fan_out, 30));
  long expect = 0;
  for (long i = 0; i < 30; ++i) expect += i * i;
  for (auto& p : parents) CHECK(p.result(60s) == expect);
}

TEST_CASE("Nested.Secede.RepeatedCallsAreHarmless" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  CHECK(client.submit(nest_twice, 1).result(30s) == 2);
  CHECK(client.submit(nest_square, 3).result(30s) == 9);
  CHECK(eventually_threads(client, 1));
}

TEST_CASE("Nested.OutsideATask.ClearErrors") {
  // In the client program, outside any task: each names the mistake.
  try {
    (void)herd::get_client();
    FAIL("get_client() outside a task did not throw");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("outside a task") != std::string::npos);
  }
  CHECK_THROWS_AS(herd::secede(), std::logic_error);
  CHECK_THROWS_AS(herd::rejoin(), std::logic_error);
}
