// The client API against a real LocalCluster: a scheduler process and worker processes, on
// loopback TCP. Each test case starts its own cluster (start-up takes milliseconds).
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include <herd/herd.hpp>

using namespace std::chrono_literals;

// ---- tasks ----
int inc(int x) { return x + 1; }
HERD_TASK(inc);
int add(int a, int b) { return a + b; }
HERD_TASK(add);
long sum_vec(std::vector<long> v) { return std::accumulate(v.begin(), v.end(), 0L); }
HERD_TASK(sum_vec);
int sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(sleep_ms);
int fail(int x) { throw std::invalid_argument("bad input " + std::to_string(x)); }
HERD_TASK(fail);
std::vector<char> make_blob(int bytes) { return std::vector<char>(static_cast<std::size_t>(bytes), 'x'); }
HERD_TASK(make_blob);
std::uint64_t bytes_held() { return herd::this_task().result_bytes_held; }
HERD_TASK(bytes_held);
long sum_with(std::vector<long> shared, long i) { return std::accumulate(shared.begin(), shared.end(), 0L) + i; }
HERD_TASK(sum_with);
std::string whoami() { return herd::this_task().worker; }
HERD_TASK(whoami);
int flaky(std::string marker) {
  if (!std::filesystem::exists(marker)) {
    std::ofstream(marker) << "tried";
    throw std::runtime_error("first attempt fails");
  }
  return 42;
}
HERD_TASK(flaky);

struct Point {
  double x = 0, y = 0;
  MSGPACK_DEFINE(x, y);
};
Point scale(Point p, double k) { return {p.x * k, p.y * k}; }
HERD_TASK(scale);

int not_registered(int x) { return x; }  // deliberately no HERD_TASK

// ---- tests ----

TEST_CASE("LocalCluster.MapGather.TenThousand" * doctest::timeout(120)) {
  herd::Client client{herd::LocalCluster{2}};
  CHECK(client.n_workers() == 2);
  std::vector<int> xs(10000);
  std::iota(xs.begin(), xs.end(), 0);
  std::vector<int> out = client.gather(client.map(inc, xs));
  REQUIRE(out.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) REQUIRE(out[i] == xs[i] + 1);
}

TEST_CASE("LocalCluster.Graph.ThreeLevels" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  // level 1: 16 leaves; level 2: 8 pair sums; level 3: 4 pair sums; plus a vector input.
  std::vector<int> leaves(16);
  std::iota(leaves.begin(), leaves.end(), 0);
  auto l1 = client.map(inc, leaves);
  std::vector<herd::Future<int>> l2, l3;
  for (std::size_t i = 0; i < l1.size(); i += 2) l2.push_back(client.submit(add, l1[i], l1[i + 1]));
  for (std::size_t i = 0; i < l2.size(); i += 2) l3.push_back(client.submit(add, l2[i], l2[i + 1]));
  const int expected = 16 * 17 / 2;  // sum of 1..16
  const std::vector<int> top = client.gather(l3);
  CHECK(std::accumulate(top.begin(), top.end(), 0) == expected);
  // A std::vector<Future<T>> argument fills a vector parameter.
  std::vector<herd::Future<long>> longs;
  for (int i = 0; i < 5; ++i) longs.push_back(client.submit(sum_vec, std::vector<long>{i, i}));
  CHECK(client.submit(sum_vec, longs).result() == 20);
}

TEST_CASE("LocalCluster.Exceptions.PropagateToDependents" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto bad = client.submit(fail, 7);
  auto downstream = client.submit(inc, bad);
  auto fine = client.submit(inc, 1);
  try {
    bad.result();
    FAIL("expected a TaskError");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "std::invalid_argument");
    CHECK(e.message() == "bad input 7");
    CHECK(e.task() == bad.key());
    CHECK(e.worker().rfind("local-", 0) == 0);
  }
  try {
    downstream.result();
    FAIL("expected a TaskError");
  } catch (const herd::TaskError& e) {
    CHECK(e.task() == downstream.key());
    CHECK(e.root_task() == bad.key());
    CHECK(std::string(e.what()).find("failed because task " + bad.key()) != std::string::npos);
  }
  CHECK(fine.result() == 2);
  CHECK(bad.status() == "error");
}

TEST_CASE("LocalCluster.Retries.RerunAThrowingTask" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  const std::string marker = "/tmp/herd-flaky-" + std::to_string(::getpid());
  std::filesystem::remove(marker);
  CHECK_THROWS_AS(client.submit(flaky, marker).result(), herd::TaskError);  // no retries
  std::filesystem::remove(marker);
  CHECK(client.submit(herd::TaskOptions{}.retries(1), flaky, marker).result() == 42);
  std::filesystem::remove(marker);
}

TEST_CASE("LocalCluster.AsCompleted.CompletionOrder" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{3}};
  std::vector<herd::Future<int>> fs = {client.submit(sleep_ms, 1500), client.submit(sleep_ms, 700),
                                       client.submit(sleep_ms, 1)};
  std::vector<int> order;
  for (const herd::Future<int>& f : client.as_completed(fs)) {
    CHECK(f.done());
    order.push_back(f.result());
  }
  CHECK(order == std::vector<int>{1, 700, 1500});
}

TEST_CASE("LocalCluster.Cancel.QueuedTask" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  auto blocker = client.submit(sleep_ms, 1500);
  auto victim = client.submit(inc, 1);
  auto dependent = client.submit(inc, victim);
  victim.cancel();
  CHECK(victim.done());
  CHECK(victim.status() == "cancelled");
  CHECK_THROWS_AS(victim.result(), herd::CancelledError);
  CHECK_THROWS_AS(dependent.result(), herd::CancelledError);
  CHECK(blocker.result() == 1500);
  CHECK(client.submit(inc, 41).result() == 42);  // the pool is fine
}

TEST_CASE("LocalCluster.Result.Timeout" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  auto slow = client.submit(sleep_ms, 1000);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(slow.result(50ms), herd::TimeoutError);
  CHECK(std::chrono::steady_clock::now() - t0 < 900ms);
  CHECK_FALSE(slow.done());
  CHECK_FALSE(slow.wait_for(10ms));
  CHECK(slow.result(30s) == 1000);
}

TEST_CASE("LocalCluster.Release.DroppedFuturesFreeWorkerMemory" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  constexpr int kBlob = 100000;
  {
    std::vector<int> sizes(50, kBlob);
    auto blobs = client.map(make_blob, sizes);
    client.wait(blobs);
    CHECK(client.submit(bytes_held).result() >= 50u * kBlob);
  }
  // The futures are gone; the worker must drop the blobs. Poll with a deadline: releases
  // travel asynchronously.
  std::uint64_t held = ~0ull;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    held = client.submit(bytes_held).result();
    if (held < kBlob) break;
  }
  CHECK(held < kBlob);
}

TEST_CASE("LocalCluster.Scatter.SharedInput" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  herd::Future<std::vector<long>> shared = client.scatter(std::vector<long>(1000, 2));
  std::vector<herd::Future<long>> fs;
  for (long i = 0; i < 100; ++i) fs.push_back(client.submit(sum_with, shared, i));
  auto out = client.gather(fs);
  for (long i = 0; i < 100; ++i) REQUIRE(out[static_cast<std::size_t>(i)] == 2000 + i);
  CHECK(shared.result().size() == 1000);
}

TEST_CASE("LocalCluster.UserStruct.ArgumentAndResult" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  Point p = client.submit(scale, Point{1.5, -2}, 2.0).result();
  CHECK(p.x == 3.0);
  CHECK(p.y == -4.0);
}

TEST_CASE("LocalCluster.LargeResult.Gather" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{2}};
  auto big = client.submit(make_blob, 16 << 20);
  auto v = big.result();
  CHECK(v.size() == static_cast<std::size_t>(16 << 20));
  CHECK(v.front() == 'x');
  CHECK(v.back() == 'x');
}

TEST_CASE("LocalCluster.Shell.CommandResult" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}};
  herd::ShellResult r =
      client.submit(herd::shell, herd::ShellCommand{"echo hello; echo oops >&2; exit 3"}).result();
  CHECK(r.exit_code == 3);
  CHECK(r.stdout_tail == "hello\n");
  CHECK(r.stderr_tail == "oops\n");
  CHECK(r.wall_time_s > 0);
  CHECK_FALSE(r.ok());
  herd::ShellResult a = client.submit(herd::shell, herd::ShellCommand{std::vector<std::string>{"printf", "%s-%s", "a", "b"}}).result();
  CHECK(a.ok());
  CHECK(a.stdout_tail == "a-b");
  herd::ShellCommand slow{"sleep 5"};
  slow.timeout_s = 0.2;
  herd::ShellResult t = client.submit(herd::shell, slow).result();
  CHECK(t.timed_out);
  CHECK(t.wall_time_s < 4);
}

TEST_CASE("LocalCluster.Resources.PlacedOnlyWhereTheyFit" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1}.worker_args({"--resources", "gpu=1"})};
  auto on_gpu = client.submit(herd::TaskOptions{}.resource("gpu", 1), inc, 1);
  CHECK(on_gpu.result() == 2);
  auto nowhere = client.submit(herd::TaskOptions{}.resource("tpu", 1), inc, 1);
  CHECK_THROWS_AS(nowhere.result(300ms), herd::TimeoutError);  // no worker offers a tpu
}

TEST_CASE("LocalCluster.LoadBalance.SlowWorkerDoesNotHoard" * doctest::timeout(60)) {
  // 2 workers, 40 tasks of 50 ms, each followed by one that says where it ran: both workers
  // must take part. The sleeps are held (a dropped future's task may never run), and both
  // workers are there first (a client does not wait for them: under load the first could
  // otherwise take every task before the second connects).
  herd::Client client{herd::LocalCluster{2}};
  client.wait_for_workers(2, 20s);
  std::vector<herd::Future<std::string>> fs;
  std::vector<herd::Future<int>> sleeps;
  for (int i = 0; i < 40; ++i) {
    sleeps.push_back(client.submit(sleep_ms, 50));
    fs.push_back(client.submit(whoami));
  }
  std::set<std::string> seen;
  for (auto& w : client.gather(fs)) seen.insert(w);
  CHECK(seen.size() == 2);
  client.wait(sleeps);
}

TEST_CASE("Client.UnregisteredFunction.NamedInError") {
  herd::Client client{herd::LocalCluster{0}};
  try {
    (void)client.submit(not_registered, 1);
    FAIL("expected FunctionNotFound");
  } catch (const herd::FunctionNotFound& e) {
    CHECK(std::string(e.what()).find("not_registered") != std::string::npos);
    CHECK(std::string(e.what()).find("HERD_TASK") != std::string::npos);
  }
}

TEST_CASE("Client.UnreachableScheduler.ClearErrorInBoundedTime" * doctest::timeout(30)) {
  herd::ClientOptions options;
  options.connect_timeout = 500ms;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    herd::Client client{"tcp://127.0.0.1:9", options};
    FAIL("expected ConnectionError");
  } catch (const herd::ConnectionError& e) {
    CHECK(std::string(e.what()).find("tcp://127.0.0.1:9") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THROWS_WITH_AS(herd::Client("not-an-address", options),
                       doctest::Contains("not-an-address"), herd::ConnectionError);
}
