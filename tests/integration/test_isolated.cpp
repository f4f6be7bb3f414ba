// TaskOptions::isolated() (issue 19's last item) against a real LocalCluster: the function runs
// in a fork()ed child of its worker, so a crash, an abort or a memory blow-up fails only that
// task (herd::TaskCrashed, or the exception as usual), a time limit or cancel(true) kills the
// child, and the same worker process runs the next task. Every check is made with values, run
// counts (marker files) and pids.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

using namespace std::chrono_literals;

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string temp_path(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("herd-isolated-" + what + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(Clock::now().time_since_epoch().count())))
      .string();
}

/// Appends this process's pid to `path` (a line per run).
void mark(const std::string& path) { std::ofstream(path, std::ios::app) << ::getpid() << "\n"; }

std::vector<long> read_marks(const std::string& path) {
  std::vector<long> pids;
  std::ifstream in(path);
  for (long pid; in >> pid;) pids.push_back(pid);
  return pids;
}

bool wait_for_marks(const std::string& path, std::size_t n, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (read_marks(path).size() >= n) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

/// Seconds until `pid` is gone (kill(pid, 0) fails with ESRCH), or -1 past `limit`.
double gone_after(pid_t pid, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return seconds_since(t0);
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}
}  // namespace

// ---- tasks ----
namespace {
/// "worker-name:pid" of the process it runs in.
std::string iso_where() { return herd::this_task().worker + ":" + std::to_string(::getpid()); }
std::vector<double> iso_scale(std::vector<double> xs, double by) {
  for (double& x : xs) x *= by;
  return xs;
}
int iso_throw(int x) { throw std::invalid_argument("x must be even, got " + std::to_string(x)); }
int iso_segv(std::string marker) {
  mark(marker);
  std::raise(SIGSEGV);
  return 0;
}
int iso_null_write(std::string marker) {
  mark(marker);
  volatile int* p = nullptr;
  *p = 1;
  return 0;
}
int iso_abort(std::string marker) {
  mark(marker);
  std::abort();
}
int iso_exit(int code) { std::exit(code); }
/// Marks its pid, then never returns.
int iso_endless(std::string marker) {
  mark(marker);
  for (;;) {
  }
}
/// Allocates and touches `bytes`.
std::uint64_t iso_blow_up(std::uint64_t bytes) {
  std::vector<char> v(bytes);
  for (std::size_t i = 0; i < v.size(); i += 4096) v[i] = 1;
  return v.size();
}
int iso_secede() {
  herd::secede();
  return 0;
}
int iso_get_client() {
  (void)herd::get_client();
  return 0;
}
}  // namespace
HERD_TASK(iso_where);
HERD_TASK(iso_scale);
HERD_TASK(iso_throw);
HERD_TASK(iso_segv);
HERD_TASK(iso_null_write);
HERD_TASK(iso_abort);
HERD_TASK(iso_exit);
HERD_TASK(iso_endless);
HERD_TASK(iso_blow_up);
HERD_TASK(iso_secede);
HERD_TASK(iso_get_client);

namespace {
const herd::TaskOptions kIsolated = herd::TaskOptions{}.isolated();

std::string worker_of(const std::string& where) { return where.substr(0, where.rfind(':')); }
std::string pid_of(const std::string& where) { return where.substr(where.rfind(':') + 1); }
}  // namespace

// ---- tests ----
TEST_CASE("Isolated.ResultsAndExceptions" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  auto t0 = Clock::now();
  const std::string child = client.submit(kIsolated, iso_where).result(30s);
  MESSAGE("an isolated task's round trip: " << seconds_since(t0) << " s");
  CHECK(worker_of(child) == worker_of(worker));  // on that worker,
  CHECK(pid_of(child) != pid_of(worker));        // in another process

  std::vector<double> xs(300000);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i);
  const auto scaled = client.submit(kIsolated, iso_scale, xs, 0.5).result(30s);  // 2.4 MB through the pipe
  REQUIRE(scaled.size() == xs.size());
  CHECK(scaled[1] == 0.5);
  CHECK(scaled.back() == 149999.5);
  // An isolated task's result is an input like any other.
  auto a = client.submit(kIsolated, iso_scale, std::vector<double>{1, 2}, 3.0);
  CHECK(client.submit(kIsolated, iso_scale, a, 2.0).result(30s) == std::vector<double>{6, 12});

  try {
    (void)client.submit(kIsolated, iso_throw, 3).result(30s);
    FAIL("expected a TaskError");
  } catch (const herd::TaskCrashed&) {
    FAIL("an exception is not a crash");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "std::invalid_argument");
    CHECK(e.message() == "x must be even, got 3");
    CHECK(e.worker() == worker_of(worker));
  }
  // secede() / get_client() in the child: a clear error, not a hang.
  try {
    (void)client.submit(kIsolated, iso_secede).result(30s);
    FAIL("expected a TaskError");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::Error");
    CHECK(e.message().find("herd::secede() is not supported in an isolated task") != std::string::npos);
  }
  try {
    (void)client.submit(kIsolated, iso_get_client).result(30s);
    FAIL("expected a TaskError");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::Error");
    CHECK(e.message().find("herd::get_client() is not supported in an isolated task") != std::string::npos);
  }
  CHECK(client.submit(iso_where).result(30s) == worker);  // the worker process is the same
}

TEST_CASE("Isolated.SegfaultFailsOnlyTheTask" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};  // one worker: the next task must run there
  const std::string worker = client.submit(iso_where).result(30s);
  const std::string marker = temp_path("segv");
  auto t0 = Clock::now();
  try {
    (void)client.submit(kIsolated, iso_segv, marker).result(30s);
    FAIL("expected TaskCrashed");
  } catch (const herd::TaskCrashed& e) {
    MESSAGE(std::string(e.what()));
    CHECK(e.type() == "herd::TaskCrashed");
    CHECK(e.message().find("SIGSEGV") != std::string::npos);
    CHECK(e.message().find("signal 11") != std::string::npos);
    CHECK(e.message().find(worker_of(worker)) != std::string::npos);
    CHECK(std::string(e.what()).find("iso_segv") != std::string::npos);
    CHECK(e.worker() == worker_of(worker));
  }
  MESSAGE("segfault to TaskCrashed: " << seconds_since(t0) << " s");
  const auto runs = read_marks(marker);
  REQUIRE(runs.size() == 1u);
  CHECK(std::to_string(runs[0]) != pid_of(worker));  // it crashed in a child
  // The same worker process takes the next task.
  CHECK(client.submit(iso_where).result(30s) == worker);
  // A null write, caught as TaskError (TaskCrashed is one).
  try {
    (void)client.submit(kIsolated, iso_null_write, marker).result(30s);
    FAIL("expected TaskCrashed");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::TaskCrashed");
    CHECK(e.message().find("SIGSEGV") != std::string::npos);
  }
  CHECK(read_marks(marker).size() == 2u);
  CHECK(client.submit(iso_where).result(30s) == worker);
  CHECK(client.status().workers.size() == 1u);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.AbortAndExitAreNamed" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  const std::string marker = temp_path("abort");
  try {
    (void)client.submit(kIsolated, iso_abort, marker).result(30s);
    FAIL("expected TaskCrashed");
  } catch (const herd::TaskCrashed& e) {
    CHECK(e.message().find("SIGABRT") != std::string::npos);
    CHECK(e.message().find("signal 6") != std::string::npos);
  }
  CHECK(read_marks(marker).size() == 1u);
  try {
    (void)client.submit(kIsolated, iso_exit, 3).result(30s);
    FAIL("expected TaskCrashed");
  } catch (const herd::TaskCrashed& e) {
    CHECK(e.message().find("exited with code 3 without a result") != std::string::npos);
  }
  CHECK(client.submit(iso_where).result(30s) == worker);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.TimeoutKillsTheChild" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  const std::string marker = temp_path("endless");
  const auto t0 = Clock::now();
  auto endless = client.submit(herd::TaskOptions{}.isolated().timeout(1), iso_endless, marker);
  try {
    (void)endless.result(30s);
    FAIL("expected a TimeoutError");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::TimeoutError");
    CHECK(e.message().find("time limit of 1 s") != std::string::npos);
  }
  const double failed_after = seconds_since(t0);
  const auto runs = read_marks(marker);
  REQUIRE(runs.size() == 1u);
  const auto child = static_cast<pid_t>(runs[0]);
  const double gone = gone_after(child, 5s);
  MESSAGE("timeout(1) failed the future after " << failed_after << " s; the child was gone " << gone
                                                << " s after that");
  CHECK(failed_after >= 0.9);
  CHECK(failed_after < 5.0);
  CHECK(gone >= 0);  // killed and reaped, not left spinning
  // The slot is free and the worker the same.
  CHECK(client.submit(iso_where).result(30s) == worker);
  std::vector<herd::Future<std::string>> after;
  for (int i = 0; i < 10; ++i) after.push_back(client.submit(iso_where));
  for (const auto& w : client.gather(after)) CHECK(w == worker);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.MemoryBlowUpUnderACap" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  const auto t0 = Clock::now();
  try {
    (void)client.submit(herd::TaskOptions{}.isolated_memory(256ull << 20), iso_blow_up, 2ull << 30).result(30s);
    FAIL("expected the allocation to fail");
  } catch (const herd::TaskError& e) {
    MESSAGE(std::string(e.what()));
    CHECK(e.type() == "std::bad_alloc");
    CHECK(e.message().find("isolated_memory") != std::string::npos);
  }
  MESSAGE("2 GiB under a 256 MiB cap failed after " << seconds_since(t0) << " s");
  // Within the cap it runs; the worker is the same process.
  CHECK(client.submit(herd::TaskOptions{}.isolated_memory(256ull << 20), iso_blow_up, 64ull << 20).result(30s) ==
        (64ull << 20));
  CHECK(client.submit(iso_where).result(30s) == worker);
}

TEST_CASE("Isolated.WorkerMemoryLimitKillsOnlyTheChild" * doctest::timeout(90)) {
  // No cap of its own, but the worker has a limit (as under Slurm): the child that pushes the
  // worker over it is killed and its task fails; the worker and its results stay.
  herd::Client client{herd::LocalCluster{1, 1}.worker_args({"--memory-limit", "300M"})};
  const std::string worker = client.submit(iso_where).result(30s);
  auto kept = client.submit(iso_blow_up, 8ull << 20);
  CHECK(kept.result(30s) == (8ull << 20));
  const auto t0 = Clock::now();
  try {
    (void)client.submit(kIsolated, iso_blow_up, 1ull << 30).result(60s);
    FAIL("expected the task over the memory limit to fail");
  } catch (const herd::TaskError& e) {
    MESSAGE(std::string(e.what()));
    CHECK(e.type() == "herd::MemoryLimitExceeded");
    CHECK(e.message().find("memory limit of 300 MiB") != std::string::npos);
    CHECK(e.message().find("the worker goes on") != std::string::npos);
  }
  MESSAGE("1 GiB against a 300 MiB worker limit failed after " << seconds_since(t0) << " s");
  CHECK(client.submit(iso_where).result(30s) == worker);  // the same process: it did not leave
  CHECK(kept.result(30s) == (8ull << 20));
}

TEST_CASE("Isolated.RetriesRerunACrash" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  const std::string marker = temp_path("retry");
  CHECK_THROWS_AS(client.submit(herd::TaskOptions{}.isolated().retries(1), iso_segv, marker).result(30s),
                  herd::TaskCrashed);
  const auto runs = read_marks(marker);
  CHECK(runs.size() == 2u);  // the first run and one retry
  if (runs.size() == 2u) CHECK(runs[0] != runs[1]);  // each in a child of its own
  CHECK(client.submit(iso_where).result(30s) == worker);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.CancelForceKillsTheChild" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  const std::string worker = client.submit(iso_where).result(30s);
  const std::string marker = temp_path("cancel");
  auto endless = client.submit(kIsolated, iso_endless, marker);
  REQUIRE(wait_for_marks(marker, 1, 20s));  // running, on the only slot
  const auto child = static_cast<pid_t>(read_marks(marker)[0]);
  CHECK(::kill(child, 0) == 0);
  auto queued = client.submit(iso_where);
  CHECK_FALSE(queued.wait_for(300ms));  // the slot is taken
  endless.cancel(true);
  CHECK_THROWS_AS(endless.result(20s), herd::CancelledError);
  const double gone = gone_after(child, 5s);
  MESSAGE("cancel(true): the child was gone " << gone << " s after the future failed");
  CHECK(gone >= 0);
  CHECK(queued.result(20s) == worker);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.ChildrenDieWithTheCluster" * doctest::timeout(60)) {
  const std::string marker = temp_path("leaving");
  pid_t child = 0;
  {
    herd::Client client{herd::LocalCluster{1, 1}};
    auto endless = client.submit(kIsolated, iso_endless, marker);
    REQUIRE(wait_for_marks(marker, 1, 20s));
    child = static_cast<pid_t>(read_marks(marker)[0]);
    CHECK(::kill(child, 0) == 0);
  }  // the workers stop
  CHECK(gone_after(child, 10s) >= 0);
  std::filesystem::remove(marker);
}

TEST_CASE("Isolated.NotForGangs" * doctest::timeout(60)) {
  herd::Client client{herd::LocalCluster{1, 1}};
  CHECK_THROWS_AS(client.submit_gang(1, kIsolated, iso_where), std::invalid_argument);
}
