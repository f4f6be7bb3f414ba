// Real processes from the outside: the `herd` CLI as scheduler and generic workers loading a
// task library, and a client killed with SIGKILL leaving nothing behind.
#include <doctest/doctest.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "common/process.hpp"
#include "protocol/messages.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

std::vector<char> produce(int n) { return std::vector<char>(static_cast<std::size_t>(n), 'p'); }
HERD_TASK(produce);
std::string consume(std::vector<char> v) { return std::to_string(v.size()) + "@" + herd::this_task().worker; }
HERD_TASK(consume);

int sleep_forever(int) {
  std::this_thread::sleep_for(std::chrono::hours(1));
  return 0;
}
HERD_TASK(sleep_forever);

}  // namespace

// Runs only as the child of NoOrphans below (it holds a cluster busy until it is killed).
TEST_CASE("Child.HoldCluster" * doctest::skip(std::getenv("HERD_TEST_CHILD_FILE") == nullptr)) {
  herd::Client client{herd::LocalCluster{2}};
  auto f = client.submit(sleep_forever, 0);
  std::ofstream(std::getenv("HERD_TEST_CHILD_FILE")) << "ready\n";
  f.wait();
}

// What a user compares when a client and a scheduler refuse each other: herd's version and the
// wire protocol version the code speaks.
TEST_CASE("Processes.Cli.Version" * doctest::timeout(30)) {
  const std::string expected = std::string("herd ") + HERD_VERSION + " (wire protocol " +
                               std::to_string(herd::protocol::kProtocolVersion) + ")\n";
  for (const char* command : {"version", "--version"}) {
    INFO(command);
    const herd::ShellResult r = herd::shell(herd::ShellCommand{std::vector<std::string>{HERD_CLI_PATH, command}});
    CHECK(r.exit_code == 0);
    CHECK(r.stdout_tail == expected);
    CHECK(r.stderr_tail.empty());
  }
}

TEST_CASE("Processes.KilledClient.NoOrphans" * doctest::timeout(60)) {
  const std::string flag = "/tmp/herd-child-" + std::to_string(::getpid());
  std::filesystem::remove(flag);
  herd::process::SpawnOptions spawn;
  spawn.argv = {herd::process::self_executable(), "--test-case=Child.HoldCluster"};
  spawn.env["HERD_TEST_CHILD_FILE"] = flag;
  spawn.stdout_path = flag + ".log";
  const pid_t child = herd::process::spawn(spawn);
  REQUIRE_MESSAGE(eventually([&] { return read_file(flag) == "ready\n"; }, 30s), read_file(flag + ".log"));
  // The client's tree: the scheduler and two workers (and nothing else of ours).
  const std::set<pid_t> tree = descendants(child);
  CHECK(tree.size() == 3);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const bool all_gone = eventually([&] { return none_alive(tree); }, 20s);
  CHECK(all_gone);
  std::filesystem::remove(flag);
  std::filesystem::remove(flag + ".log");
}

TEST_CASE("Processes.CliScheduler.GenericWorkersLoadTaskLibrary" * doctest::timeout(60)) {
  const std::string log = "/tmp/herd-cli-sched-" + std::to_string(::getpid()) + ".log";
  std::filesystem::remove(log);
  const auto [sched, address] =
      herd::testing::start_scheduler({HERD_CLI_PATH, "scheduler", "--local-workers", "2", "--worker-exe", HERD_CLI_PATH,
                                      "--worker-arg=--load", std::string("--worker-arg=") + HERD_TASKLIB_PATH},
                                     log);
  {
    herd::Client client{address};
    client.wait_for_workers(2, 20s);
    // The client does not link `shout`: it names it.
    auto f = client.submit_by_name<std::string>("shout", {}, std::string("hi"));
    CHECK(f.result() == "HI!");
    auto missing = client.submit_by_name<int>("no_such_function", {}, 1);
    try {
      missing.result();
      FAIL("expected TaskError");
    } catch (const herd::TaskError& e) {
      CHECK(e.type() == "herd::FunctionNotFound");
      CHECK(e.message().find("no_such_function") != std::string::npos);
    }
  }
  const auto workers = descendants(sched);
  CHECK(workers.size() == 2);
  ::kill(sched, SIGTERM);
  int status = 0;
  ::waitpid(sched, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(eventually([&] { return none_alive(workers); }, 10s));
  std::filesystem::remove(log);
}

TEST_CASE("Processes.SchedulerGone.ClientErrorsInBoundedTime" * doctest::timeout(60)) {
  herd::LocalCluster cluster{1};
  cluster.env("HERD_TIMEOUT_MS", "2000");
  const std::string address = cluster.start();
  const pid_t sched = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(1, 20s);
  auto f = client.submit(sleep_forever, 0);
  ::kill(sched, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(f.result(), herd::ConnectionError);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
}


TEST_CASE("Processes.Data.MovesBetweenWorkers" * doctest::timeout(60)) {
  // Two workers with different resources: the producer runs on one, the consumer must run on
  // the other, so the 1 MiB input travels worker to worker.
  herd::LocalCluster cluster{0};
  const std::string address = cluster.start();
  const std::string log = "/tmp/herd-move-" + std::to_string(::getpid());
  const pid_t a = spawn_worker(address, "wa", "a=1", log + "-a.log");
  const pid_t b = spawn_worker(address, "wb", "b=1", log + "-b.log");
  {
    herd::Client client{address};
    client.wait_for_workers(2, 20s);
    auto p = client.submit(herd::TaskOptions{}.resource("a", 1), produce, 1 << 20);
    auto c = client.submit(herd::TaskOptions{}.resource("b", 1), consume, p);
    CHECK(c.result() == std::to_string(1 << 20) + "@wb");
    CHECK(p.result().size() == static_cast<std::size_t>(1 << 20));
  }
  cluster.close();  // the scheduler tells its workers to stop
  int status = 0;
  CHECK(::waitpid(a, &status, 0) == a);
  CHECK(::waitpid(b, &status, 0) == b);
  std::filesystem::remove(log + "-a.log");
  std::filesystem::remove(log + "-b.log");
}

int plus_one(int x) { return x + 1; }
HERD_TASK(plus_one);
int nap_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap_ms);
TEST_CASE("Processes.Placement.CpuTasksDoNotWaitBehindBusyGpuTasks" * doctest::timeout(60)) {
  // One worker offers a GPU, one offers nothing; four 3-second GPU tasks, then 20 instant CPU
  // tasks: the CPU tasks all finish while the first GPU task still runs (no head-of-line
  // blocking behind tasks that must wait for the GPU, and nothing queued behind a busy GPU).
  herd::LocalCluster cluster{0};
  const std::string address = cluster.start();
  const std::string log = "/tmp/herd-hol-" + std::to_string(::getpid());
  const pid_t g = spawn_worker(address, "with-gpu", "gpu=1", log + "-g.log");
  const pid_t c = spawn_worker(address, "cpu-only", "x=1", log + "-c.log");
  {
    herd::Client client{address};
    client.wait_for_workers(2, 20s);
    std::vector<herd::Future<int>> gpu, cpu;
    for (int i = 0; i < 4; ++i) gpu.push_back(client.submit(herd::TaskOptions{}.gpus(1), nap_ms, 3000));
    for (int i = 0; i < 20; ++i) cpu.push_back(client.submit(plus_one, i));
    const auto values = client.gather(cpu);
    CHECK_FALSE(gpu[0].done());  // the first 3-second GPU task is still running
    for (int i = 0; i < 20; ++i) CHECK(values[static_cast<std::size_t>(i)] == i + 1);
    CHECK(gpu[0].result() == 3000);
    cluster.close();
  }
  int status = 0;
  CHECK(::waitpid(g, &status, 0) == g);
  CHECK(::waitpid(c, &status, 0) == c);
  std::filesystem::remove(log + "-g.log");
  std::filesystem::remove(log + "-c.log");
}

namespace {
// Whether it ran on the worker's I/O thread: its main thread (Worker::run), or the thread that
// took the loop over from it (named herd-io), not an executor.
bool on_io_thread() {
  char name[16] = {0};
  return ::gettid() == ::getpid() || (::pthread_getname_np(::pthread_self(), name, sizeof name) == 0 &&
                                      std::string(name) == "herd-io");
}
int where_ms(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return on_io_thread() ? 1 : 0;
}
HERD_TASK(where_ms);
int where_ms_too(int ms) { return where_ms(ms); }
HERD_TASK(where_ms_too);
int where_print(int x) {
  std::cout << "inline-line-" << x << std::endl;
  return on_io_thread() ? 1 : 0;
}
HERD_TASK(where_print);
int where_secede(int secede) {
  if (secede != 0) herd::secede();  // on the I/O thread: nothing to give back, and no hang
  return on_io_thread() ? 1 : 0;
}
HERD_TASK(where_secede);
// 1 for each of n sequential runs that took the I/O thread.
std::vector<int> runs_where(herd::Client& client, herd::TaskOptions options, int (*f)(int), int arg, int n) {
  std::vector<int> where;
  for (int i = 0; i < n; ++i) where.push_back(client.submit(options, f, arg).result());
  return where;
}
int count(const std::vector<int>& v) { return static_cast<int>(std::count(v.begin(), v.end(), 1)); }
}  // namespace

// A task of a function whose last 8 runs each took under HERD_INLINE_US runs on the worker's
// I/O thread when it is the only one to start (no hand-off to an executor and back on a round
// trip). Not a task with a time limit; not a function that took long there or seceded, ever
// again; and with HERD_INLINE_US=0, none.
TEST_CASE("Processes.Inline.QuickFunctionsRunOnTheIoThreadUntilTheyTakeLong" * doctest::timeout(120)) {
  // 5 ms: "quick" must not depend on how loaded the machine is (printing into the capture pipe
  // beside two busy processes takes longer than the default 100 us).
  ::setenv("HERD_INLINE_US", "5000", 1);
  {
    herd::Client client{herd::LocalCluster{1}};
    const auto first = runs_where(client, {}, where_ms, 0, 30);
    CHECK(first.front() == 0);  // unknown at first: an executor
    CHECK_MESSAGE(count({first.end() - 10, first.end()}) == 10, "where: ", doctest::toString(first));
    // Its output is still the task's own. Printing into the capture pipe can take longer than
    // HERD_INLINE_US on a loaded machine, which sends the next 8 runs to executors: the first of
    // up to 40 runs that takes the I/O thread is the one looked at.
    const auto printed = runs_where(client, {}, where_print, 7, 12);
    std::optional<herd::Future<int>> last;
    for (int i = 0; i < 40 && !last; ++i) {
      auto f = client.submit(where_print, 8);
      if (f.result() == 1) last = f;
    }
    REQUIRE(last.has_value());
    const std::string text = client.task_output(*last).text();
    CHECK_MESSAGE(text.find("inline-line-8") != std::string::npos, text);
    CHECK(count(printed) >= 1);
    // A time limit needs an executor (the thread is abandoned when it passes).
    CHECK(count(runs_where(client, herd::TaskOptions{}.timeout(30), where_ms, 0, 5)) == 0);
    // 60 ms on the I/O thread (more than 10x HERD_INLINE_US) once: the next 8 runs go to
    // executors, then quick runs take the I/O thread again (one slow run may have been the
    // thread preempted on a busy host). Twice within 64 runs there: executors from then on.
    CHECK(client.submit(where_ms, 60).result() == 1);
    const auto after_one = runs_where(client, {}, where_ms, 0, 20);
    CHECK_MESSAGE(count({after_one.begin(), after_one.begin() + 8}) == 0, "where: ", doctest::toString(after_one));
    CHECK_MESSAGE(count({after_one.begin() + 8, after_one.end()}) >= 1, "where: ", doctest::toString(after_one));
    // Quick runs until one takes the I/O thread (on a loaded machine one can pass 5 ms and send
    // the next 8 to executors): the next goes there too, and is slow a second time.
    bool ready = after_one.back() == 1;
    for (int i = 0; i < 40 && !ready; ++i) ready = client.submit(where_ms, 0).result() == 1;
    REQUIRE(ready);
    CHECK(client.submit(where_ms, 60).result() == 1);
    CHECK(count(runs_where(client, {}, where_ms, 0, 20)) == 0);
    // Slow runs far apart (more than 64 runs there between them) are each forgiven, up to the
    // fourth: so a function slow now and then holds the I/O thread a bounded number of times.
    for (int slow = 1; slow <= 4; ++slow) {
      int inline_runs = 0;
      for (int i = 0; i < 400 && inline_runs < 70; ++i) inline_runs += client.submit(where_ms_too, 0).result();
      REQUIRE(inline_runs == 70);
      CHECK(client.submit(where_ms_too, 60).result() == 1);
    }
    CHECK(count(runs_where(client, {}, where_ms_too, 0, 20)) == 0);
    // secede() there does nothing (no slot to give back) and hangs nothing; executors after.
    CHECK(count(runs_where(client, {}, where_secede, 0, 20)) >= 5);
    CHECK(client.submit(where_secede, 1).result() == 1);
    CHECK(count(runs_where(client, {}, where_secede, 0, 20)) == 0);
  }
  {
    // A one-slot worker sent a batch of quick tasks: one a turn on the I/O thread, the rest on
    // the executor (which takes the next itself), so the I/O thread is back at its sockets after
    // each (and does not recurse through the batch).
    herd::Client client{herd::LocalCluster{1, 1}};
    CHECK(count({runs_where(client, {}, where_ms, 0, 30)}) >= 10);
    const auto where = client.gather(client.map(where_ms, std::vector<int>(2000, 0)));
    REQUIRE(where.size() == 2000);
    MESSAGE(count(where) << " of 2000 on the I/O thread");
    CHECK(count(where) < 1000);
  }
  ::setenv("HERD_INLINE_US", "0", 1);
  {
    herd::Client client{herd::LocalCluster{1}};
    CHECK(count(runs_where(client, {}, where_ms, 0, 30)) == 0);
  }
  ::unsetenv("HERD_INLINE_US");
}

namespace {
// Quick, or (ms > 0) a line in `marker` and then blocking: a cache miss after hits.
int quick_then_blocks(int ms, std::string marker) {
  if (ms > 0) {
    std::ofstream(marker, std::ios::app) << "ran\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  return on_io_thread() ? 1 : 0;
}
HERD_TASK(quick_then_blocks);
int quick_then_blocks_too(int ms, std::string marker) { return quick_then_blocks(ms, std::move(marker)); }
HERD_TASK(quick_then_blocks_too);
int threads_named(pid_t pid, const std::string& name) {
  int n = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    n += read_file(t.path().string() + "/comm") == name + "\n" ? 1 : 0;
  }
  return n;
}
}  // namespace

// A function quick until now that then blocks starts on the worker's I/O thread (it cannot
// know); after ~100 ms another thread takes the sockets. So the worker stays alive past the
// scheduler's timeout (1.5 s here), the other slot keeps running tasks meanwhile, the task runs
// once with its value, and the worker still ends when the cluster does. Twice, so that the
// thread that took over is itself relieved.
TEST_CASE("Processes.Inline.ATaskThatBlocksTheIoThreadIsRelieved" * doctest::timeout(120)) {
  const std::string marker = "/tmp/herd-relief-" + std::to_string(::getpid());
  std::filesystem::remove(marker);
  herd::LocalCluster cluster{1, 2};
  cluster.env("HERD_TIMEOUT_MS", "1500").env("HERD_HEARTBEAT_MS", "100").env("HERD_INLINE_US", "5000");
  const std::string address = cluster.start();
  const pid_t sched = cluster.scheduler_pid();
  std::set<pid_t> workers;
  {
    herd::Client client{address};
    client.wait_for_workers(1, 20s);
    workers = descendants(sched);
    REQUIRE(workers.size() == 1);
    int round = 0;
    for (auto* f : {&quick_then_blocks, &quick_then_blocks_too}) {
      ++round;
      int inline_runs = 0;
      for (int i = 0; i < 12; ++i) inline_runs += client.submit(f, 0, marker).result();
      CHECK(inline_runs >= 1);  // quick: the I/O thread takes them (the main one, then herd-io)
      const auto t0 = std::chrono::steady_clock::now();
      auto blocker = client.submit(f, 3000, marker);  // twice the scheduler's timeout
      REQUIRE(eventually([&] { return read_file(marker).size() == 4u * static_cast<std::size_t>(round); }, 20s));
      // The other slot: 20 tasks while it blocks (the loop is another thread's by now), and
      // another run of the same function, which goes to an executor (not to block the new
      // I/O thread in turn).
      std::vector<int> zeros(20, 0);
      const auto others = client.gather(client.map(where_ms, zeros));
      CHECK(others.size() == 20);
      CHECK(client.submit(f, 300, marker + "-again").result() == 0);
      CHECK_FALSE(blocker.done());
      CHECK(threads_named(*workers.begin(), "herd-io") == round);  // one relief per blocked run
      CHECK(blocker.result() == 1);  // it started on the I/O thread
      MESSAGE("blocked " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
      CHECK(read_file(marker).size() == 4u * static_cast<std::size_t>(round));  // once
      CHECK(descendants(sched) == workers);  // not counted lost, not replaced
      CHECK(client.n_workers() == 1);
    }
  }
  cluster.close();
  CHECK(eventually([&] { return none_alive(workers); }, 15s));
  std::filesystem::remove(marker);
  std::filesystem::remove(marker + "-again");
}

TEST_CASE("Processes.SchedulerKilled.WorkerExitsOnItsOwn" * doctest::timeout(60)) {
  herd::LocalCluster cluster{0};
  cluster.env("HERD_TIMEOUT_MS", "1500").env("HERD_HEARTBEAT_MS", "100");
  const std::string address = cluster.start();
  const pid_t sched = cluster.scheduler_pid();
  const std::string log = "/tmp/herd-orphan-" + std::to_string(::getpid()) + ".log";
  const pid_t w = spawn_worker(address, "lonely", "x=1", log);
  {
    herd::Client client{address};
    client.wait_for_workers(1, 20s);
  }
  ::kill(sched, SIGKILL);  // no goodbye: the worker must notice the silence
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  CHECK(eventually([&] { return ::waitpid(w, &status, WNOHANG) == w; }, 20s));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  // Silence on ZeroMQ, or at once its control link closed by the kernel of the dead scheduler.
  const std::string said = read_file(log);
  CHECK((said.find("silent") != std::string::npos || said.find("control link to the scheduler broke") != std::string::npos));
  std::filesystem::remove(log);
}

namespace {
/// Appends one line to `marker` per run, so a test can tell whether a task was recomputed.
int counted_pid(std::string marker) {
  std::ofstream(marker, std::ios::app) << "run\n";
  return static_cast<int>(::getpid());
}
HERD_TASK(counted_pid);
int pid_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int>(::getpid());
}
HERD_TASK(pid_after);
}  // namespace

TEST_CASE("Processes.Drain.SigtermHandsWorkOverCleanly" * doctest::timeout(90)) {
  herd::LocalCluster cluster{2};
  const std::string address = cluster.start();
  herd::Client client{address};
  client.wait_for_workers(2, 20s);
  const std::string marker = "/tmp/herd-drain-" + std::to_string(::getpid());
  std::filesystem::remove(marker);
  // A result that lives on one worker only.
  herd::Future<int> held = client.submit(counted_pid, marker);
  const pid_t victim = held.result();
  // Keep both workers busy, then SIGTERM the one holding `held`.
  std::vector<int> ms(8, 600);
  auto busy = client.map(pid_after, ms);
  std::this_thread::sleep_for(300ms);  // let the first tasks start (not a correctness wait)
  REQUIRE(::kill(victim, SIGTERM) == 0);
  for (int pid : client.gather(busy)) CHECK(pid > 0);  // every task finished, none failed
  // The victim leaves by itself.
  CHECK(eventually([&] { return !alive(victim); }, 30s));
  // `held` was copied before it left: using it does not recompute it.
  CHECK(client.submit(plus_one, held).result() == victim + 1);
  CHECK(read_file(marker) == "run\n");
  std::filesystem::remove(marker);
}
