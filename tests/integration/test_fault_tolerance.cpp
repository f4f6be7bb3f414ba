// Nothing lost: workers killed, stopped, crashing; lineage; scattered data; poison tasks; a
// soak with a chaos thread. Real processes on loopback; liveness timeouts shortened through
// the environment so that losses are noticed within a couple of seconds.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "support/process_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

/// (input, pid of the worker): results must be right, wherever they ran.
std::pair<int, int> work(int i, int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {i * 2, static_cast<int>(::getpid())};
}
HERD_TASK(work);

/// Appends a line to `marker` per run (to count recomputations); returns its pid.
int counted(std::string marker) {
  std::ofstream(marker, std::ios::app) << "run\n";
  return static_cast<int>(::getpid());
}
HERD_TASK(counted);

int combine(int a, int b) { return a + b; }
HERD_TASK(combine);

int pid_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int>(::getpid());
}
HERD_TASK(pid_after);

int poison(int) {
  std::abort();  // takes the worker process down every time
}
HERD_TASK(poison);

long sum_of(std::vector<long> v) {
  long s = 0;
  for (long x : v) s += x;
  return s;
}
HERD_TASK(sum_of);

/// A LocalCluster that notices silent peers within 1.5 s.
herd::LocalCluster fast_cluster(int workers) {
  return std::move(herd::LocalCluster{workers}.env("HERD_TIMEOUT_MS", "1500").env("HERD_HEARTBEAT_MS", "100"));
}

std::vector<pid_t> worker_pids(pid_t scheduler) {
  const auto all = descendants(scheduler);
  std::vector<pid_t> out;
  for (pid_t p : all) {
    if (alive(p)) out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("Faults.KilledWorker.MapStillCorrect" * doctest::timeout(120)) {
  herd::LocalCluster cluster = fast_cluster(4);
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(4, 20s);
  std::vector<int> xs(1000), ms(1000, 20);
  for (int i = 0; i < 1000; ++i) xs[static_cast<std::size_t>(i)] = i;

  auto t0 = std::chrono::steady_clock::now();
  auto baseline = client.gather(client.map(work, xs, ms));
  const double clean_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  t0 = std::chrono::steady_clock::now();
  auto fs = client.map(work, xs, ms);
  // Half-way: SIGKILL one worker.
  REQUIRE(eventually([&] {
    int done = 0;
    for (const auto& f : fs) done += f.done();
    return done >= 500;
  }, 60s));
  const auto workers = worker_pids(scheduler);
  REQUIRE(workers.size() == 4);
  REQUIRE(::kill(workers.front(), SIGKILL) == 0);
  // Each future completes exactly once, with the right value.
  std::map<std::string, int> seen;
  for (const auto& f : client.as_completed(fs)) ++seen[f.key()];
  const double killed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seen.size() == 1000);
  for (const auto& [key, n] : seen) CHECK(n == 1);
  auto out = client.gather(fs);
  for (int i = 0; i < 1000; ++i) REQUIRE(out[static_cast<std::size_t>(i)].first == 2 * i);
  MESSAGE("1000 x 20 ms on 4 workers: " << clean_s << " s clean, " << killed_s
                                        << " s with a worker SIGKILLed half-way (+" << killed_s - clean_s << " s)");
  // The pool replaces the dead worker.
  CHECK(eventually([&] { return client.n_workers() == 4; }, 20s));
}

TEST_CASE("Faults.Lineage.LostInputRecomputedOnce" * doctest::timeout(90)) {
  // Two workers with different resources, so we know where `a` lives and can kill it there.
  herd::LocalCluster cluster{0};
  cluster.env("HERD_TIMEOUT_MS", "1500").env("HERD_HEARTBEAT_MS", "100");
  const std::string address = cluster.start();
  const std::string tmp = "/tmp/herd-lineage-" + std::to_string(::getpid());
  std::filesystem::remove(tmp + ".marker");
  const pid_t wa = spawn_worker(address, "wa", "a=1", tmp + "-a.log");
  const pid_t wb = spawn_worker(address, "wb", "b=1", tmp + "-b.log");
  herd::Client client{address};
  client.wait_for_workers(2, 20s);
  auto a = client.submit(herd::TaskOptions{}.resource("a", 1), counted, tmp + ".marker");
  CHECK(a.result() == wa);
  auto slow = client.submit(herd::TaskOptions{}.resource("b", 1), pid_after, 1500);
  auto b = client.submit(herd::TaskOptions{}.resource("b", 1), combine, a, slow);  // waits for slow
  ::kill(wa, SIGKILL);  // a's only copy goes before b could fetch it
  ::waitpid(wa, nullptr, 0);
  const pid_t wa2 = spawn_worker(address, "wa2", "a=1", tmp + "-a2.log");  // where a can run again
  CHECK(b.result(60s) == wa2 + wb);
  CHECK(read_file(tmp + ".marker") == "run\nrun\n");  // computed, lost, recomputed once
  ::kill(wb, SIGTERM);
  ::kill(wa2, SIGTERM);
  ::waitpid(wb, nullptr, 0);
  ::waitpid(wa2, nullptr, 0);
  for (const char* f : {".marker", "-a.log", "-b.log", "-a2.log"}) std::filesystem::remove(tmp + f);
}

TEST_CASE("Faults.Scatter.LostDataFailsDependentsFast" * doctest::timeout(60)) {
  herd::LocalCluster cluster = fast_cluster(1);
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(1, 20s);
  auto shared = client.scatter(std::vector<long>{1, 2, 3});
  CHECK(client.submit(sum_of, shared).result() == 6);
  const auto workers = worker_pids(scheduler);
  REQUIRE(workers.size() == 1);
  ::kill(workers.front(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  auto after = client.submit(sum_of, shared);
  try {
    after.result(30s);
    FAIL("expected the dependent of lost scattered data to fail");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::ScatteredDataLost");
    CHECK(e.message().find("scattered") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
}

TEST_CASE("Faults.PoisonTask.FailsAfterAllowedDeathsOthersFinish" * doctest::timeout(120)) {
  herd::LocalCluster cluster = fast_cluster(2);
  cluster.env("HERD_ALLOWED_FAILURES", "2");
  herd::Client client{std::move(cluster)};
  auto bad = client.submit(herd::TaskOptions{}.key("poison-pill"), poison, 0);
  std::vector<int> xs(100), ms(100, 5);
  for (int i = 0; i < 100; ++i) xs[static_cast<std::size_t>(i)] = i;
  auto good = client.map(work, xs, ms);
  try {
    bad.result(90s);
    FAIL("expected the poison task to fail");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::KilledWorker");
    CHECK(e.task() == "poison-pill");
    CHECK(e.message().find("poison-pill") != std::string::npos);
    CHECK(e.message().find("3 workers") != std::string::npos);  // 2 allowed, the 3rd is too many
    CHECK(e.message().find("local-") != std::string::npos);     // names the workers
  }
  auto out = client.gather(good);
  for (int i = 0; i < 100; ++i) REQUIRE(out[static_cast<std::size_t>(i)].first == 2 * i);
  CHECK(eventually([&] { return client.n_workers() == 2; }, 20s));  // the pool recovered
}

TEST_CASE("Faults.PoisonTask.SuspectsRunAloneSoInnocentsSurvive" * doctest::timeout(120)) {
  // One death allowed: a task queued beside the poison pill at two deaths would fail too. Once
  // a task has been on a dying worker it runs alone, so only the pill reaches a second death.
  herd::LocalCluster cluster = fast_cluster(2);
  cluster.env("HERD_ALLOWED_FAILURES", "1");
  herd::Client client{std::move(cluster)};
  std::vector<int> xs(300), ms(300, 2);
  for (int i = 0; i < 300; ++i) xs[static_cast<std::size_t>(i)] = i;
  auto before = client.map(work, xs, ms);
  auto bad = client.submit(herd::TaskOptions{}.key("poison-pill"), poison, 0);
  auto after = client.map(work, xs, ms);
  try {
    bad.result(90s);
    FAIL("expected the poison task to fail");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::KilledWorker");
    CHECK(e.message().find("2 workers") != std::string::npos);
  }
  auto a = client.gather(before);
  auto b = client.gather(after);
  for (int i = 0; i < 300; ++i) {
    REQUIRE(a[static_cast<std::size_t>(i)].first == 2 * i);
    REQUIRE(b[static_cast<std::size_t>(i)].first == 2 * i);
  }
}

TEST_CASE("Faults.StoppedWorker.DeclaredLostLateResultsIgnored" * doctest::timeout(90)) {
  herd::LocalCluster cluster = fast_cluster(2);
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(2, 20s);
  const auto workers = worker_pids(scheduler);
  REQUIRE(workers.size() == 2);
  std::vector<int> xs(40), ms(40, 100);
  for (int i = 0; i < 40; ++i) xs[static_cast<std::size_t>(i)] = i;
  auto fs = client.map(work, xs, ms);
  std::this_thread::sleep_for(300ms);  // let both start (not a correctness wait)
  const pid_t frozen = workers.front();
  ::kill(frozen, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, int> seen;
  for (const auto& f : client.as_completed(fs)) ++seen[f.key()];
  MESSAGE("40 x 100 ms with a worker SIGSTOPped: done after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  for (const auto& [k, n] : seen) CHECK(n == 1);
  // All gathered while it is still stopped: a value from it reached the client before it
  // stopped (the client holds that value; nothing recomputes it), the rest ran on the other.
  auto out = client.gather(fs);
  std::size_t from_frozen = 0;
  for (int i = 0; i < 40; ++i) {
    REQUIRE(out[static_cast<std::size_t>(i)].first == 2 * i);
    from_frozen += out[static_cast<std::size_t>(i)].second == frozen;
  }
  CHECK(from_frozen < 40);
  // Woken up, the stale worker's late messages (the task it was stopped in) are ignored and it
  // is told to leave: no value changes, nor where it came from.
  ::kill(frozen, SIGCONT);
  CHECK(eventually([&] { return !alive(frozen); }, 20s));
  for (int i = 0; i < 40; ++i) CHECK(fs[static_cast<std::size_t>(i)].result() == out[static_cast<std::size_t>(i)]);
}

TEST_CASE("Faults.Soak.ChaosKillsWorkersAllResultsCorrect" * doctest::timeout(300)) {
  herd::LocalCluster cluster = fast_cluster(4);
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  herd::Client client{address};
  client.wait_for_workers(4, 20s);
  constexpr int kTasks = 100000;
  std::vector<int> xs(kTasks), ms(kTasks, 0);
  for (int i = 0; i < kTasks; ++i) xs[static_cast<std::size_t>(i)] = i;
  std::atomic<bool> stop{false};
  std::atomic<int> kills{0};
  std::thread chaos([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      std::this_thread::sleep_for(1500ms);
      if (stop.load()) break;
      auto ws = worker_pids(scheduler);
      if (ws.size() < 2) continue;
      ::kill(ws[rng() % ws.size()], SIGKILL);
      ++kills;
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  // In waves, so that the run lasts long enough for the chaos thread to strike several times.
  std::vector<std::pair<int, int>> out;
  for (int wave = 0; wave < 10; ++wave) {
    std::vector<int> part(xs.begin() + wave * (kTasks / 10), xs.begin() + (wave + 1) * (kTasks / 10));
    std::vector<int> zero(part.size(), 0);
    auto got = client.gather(client.map(work, part, zero));
    out.insert(out.end(), got.begin(), got.end());
    std::this_thread::sleep_for(300ms);  // spread the run over time for the chaos thread
  }
  stop = true;
  chaos.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("soak: " << kTasks << " tasks, " << kills.load() << " workers killed, " << s << " s");
  CHECK(kills.load() >= 2);
  REQUIRE(out.size() == static_cast<std::size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) REQUIRE(out[static_cast<std::size_t>(i)].first == 2 * i);
}

namespace {
std::size_t hog(std::size_t mib) {
  std::vector<char> v(mib << 20);  // zero-filled: every page touched, resident
  return v.size() + static_cast<std::size_t>(v[v.size() / 2]);
}
HERD_TASK(hog);
}  // namespace

TEST_CASE("Faults.MemoryLimit.TaskFailsWithClearError" * doctest::timeout(90)) {
  herd::Client client{herd::LocalCluster{1}.worker_args({"--memory-limit", "200M"})};
  auto small = client.submit(hog, 10);
  CHECK(small.result() == std::size_t{10} << 20);
  auto big = client.submit(hog, 800);
  try {
    big.result(60s);
    FAIL("expected the task over the memory limit to fail");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::MemoryLimitExceeded");
    CHECK(e.message().find("memory limit of 200 MiB") != std::string::npos);
    CHECK(e.task() == big.key());
  }
  // The worker left and was replaced; the next tasks run, and earlier results are intact.
  CHECK(client.submit(hog, 20).result(60s) == std::size_t{20} << 20);
  CHECK(small.result() == std::size_t{10} << 20);
}

namespace {
/// A step of a chain: counts its runs in `marker`, takes a while, adds one.
int step(std::string marker, int previous) {
  std::ofstream(marker, std::ios::app) << previous << "\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return previous + 1;
}
HERD_TASK(step);

/// The chain step-0 -> step-1 -> ... -> step-(n-1), keyed so that a journal can recognise it.
std::vector<herd::Future<int>> submit_chain(herd::Client& client, const std::string& marker, int n) {
  std::vector<herd::Future<int>> chain;
  chain.push_back(client.submit(herd::TaskOptions{}.key("step-0"), step, marker, 0));
  for (int i = 1; i < n; ++i) {
    chain.push_back(client.submit(herd::TaskOptions{}.key("step-" + std::to_string(i)), step, marker, chain.back()));
  }
  return chain;
}

std::size_t lines(const std::string& path) {
  const std::string text = read_file(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}
}  // namespace

TEST_CASE("Faults.Journal.RestartDoesNotRecompute" * doctest::timeout(120)) {
  const std::string tmp = "/tmp/herd-journal-" + std::to_string(::getpid());
  std::filesystem::remove(tmp + ".journal");
  std::filesystem::remove(tmp + ".marker");
  std::size_t ran_before_kill = 0;
  {
    herd::LocalCluster cluster = fast_cluster(1);
    cluster.env("HERD_JOURNAL", tmp + ".journal");
    const std::string address = cluster.start();
    herd::Client client{address};
    client.wait_for_workers(1, 20s);
    auto chain = submit_chain(client, tmp + ".marker", 20);
    CHECK(chain[7].result(30s) == 8);  // part of the graph is done
    ::kill(cluster.scheduler_pid(), SIGKILL);
    CHECK_THROWS_AS(chain.back().result(30s), herd::ConnectionError);
    ran_before_kill = lines(tmp + ".marker");
  }
  CHECK(ran_before_kill >= 8);
  CHECK(ran_before_kill < 20);
  // A new scheduler with the same journal; the client submits the same keyed graph again.
  herd::LocalCluster cluster = fast_cluster(1);
  cluster.env("HERD_JOURNAL", tmp + ".journal");
  herd::Client client{std::move(cluster)};
  auto chain = submit_chain(client, tmp + ".marker", 20);
  for (int i = 0; i < 20; ++i) CHECK(chain[static_cast<std::size_t>(i)].result(60s) == i + 1);
  const std::size_t ran_total = lines(tmp + ".marker");
  MESSAGE(ran_before_kill << " steps ran before the scheduler was killed; " << ran_total - ran_before_kill
                          << " after the restart (of 20)");
  // Finished steps were not run again (one step may have been cut mid-run by the kill).
  CHECK(ran_total <= 21);
  CHECK(ran_total >= 20);
  std::filesystem::remove(tmp + ".journal");
  std::filesystem::remove(tmp + ".journal.lock");
  std::filesystem::remove(tmp + ".marker");
}

namespace {
/// A keyed result of 4 KiB (the journal keeps keyed results in full).
std::string blob(int i) { return std::string(4096, static_cast<char>('a' + i % 26)); }
HERD_TASK(blob);

/// A tmpfs of `size` mounted for the test, unmounted whatever happens.
struct Tmpfs {
  std::string dir;
  explicit Tmpfs(const std::string& size) : dir("/tmp/herd-tmpfs-" + std::to_string(::getpid())) {
    std::filesystem::create_directories(dir);
    REQUIRE_MESSAGE(::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0,
                    "mount tmpfs: " << std::strerror(errno));
  }
  ~Tmpfs() {
    ::umount2(dir.c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir);
  }
};
}  // namespace

TEST_CASE("Faults.Journal.DiskFullSchedulerStaysUpEveryFutureSucceeds" * doctest::timeout(120)) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a tmpfs needs root");
    return;
  }
  Tmpfs disk("256k");
  herd::LocalCluster cluster = fast_cluster(2);
  cluster.env("HERD_JOURNAL", disk.dir + "/herd.journal");
  herd::Client client{std::move(cluster)};
  // 300 results of 4 KiB: 1.2 MiB into 256 KiB.
  std::vector<herd::Future<std::string>> futures;
  for (int i = 0; i < 300; ++i) {
    futures.push_back(client.submit(herd::TaskOptions{}.key("blob-" + std::to_string(i)), blob, i));
  }
  for (int i = 0; i < 300; ++i) REQUIRE(futures[static_cast<std::size_t>(i)].result(60s) == blob(i));
  // The scheduler is up, says what is wrong and how far behind, and goes on working.
  const herd::ClusterStatus st = client.status();
  CHECK(st.journal_failing);
  CHECK(st.journal_behind > 0);
  CHECK(st.journal.find("No space left on device") != std::string::npos);
  CHECK(st.journal.find("BEHIND") != std::string::npos);
  CHECK(st.to_text().find("No space left on device") != std::string::npos);
  CHECK(st.to_json().find("\"journal_failing\":true") != std::string::npos);
  MESSAGE("journal: " << st.journal);
  CHECK(client.submit(herd::TaskOptions{}.key("after"), blob, 1).result(30s) == blob(1));
  // Room again: the writer catches up on its own, and says so.
  REQUIRE(::mount("tmpfs", disk.dir.c_str(), "tmpfs", MS_REMOUNT, "size=8m") == 0);
  CHECK(eventually([&] {
    const auto s = client.status();
    return !s.journal_failing && s.journal_behind == 0;
  }, 30s));
  CHECK(std::filesystem::file_size(disk.dir + "/herd.journal") > 301 * 4096);
}

TEST_CASE("Faults.Journal.SecondSchedulerOnTheSameJournalIsRefused" * doctest::timeout(60)) {
  const std::string path = "/tmp/herd-journal-two-" + std::to_string(::getpid());
  std::filesystem::remove(path);
  herd::LocalCluster first = fast_cluster(1);
  first.env("HERD_JOURNAL", path);
  (void)first.start();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  herd::LocalCluster second = fast_cluster(1);
  second.env("HERD_JOURNAL", path);
  try {
    (void)second.start();
    FAIL("a second scheduler started on the same journal");
  } catch (const herd::Error& e) {
    const std::string what = e.what();
    MESSAGE(what);
    CHECK(what.find("journal " + path + " is in use by scheduler pid " + std::to_string(first.scheduler_pid()) +
                    " on host " + host) != std::string::npos);
  }
  herd::Client client{first.start()};  // the first one is unharmed
  client.wait_for_workers(1, 20s);
  CHECK(client.submit(herd::TaskOptions{}.key("k"), blob, 2).result(30s) == blob(2));
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

TEST_CASE("Faults.ShellTask.DiesWithItsWorkerEvenSigkilled" * doctest::timeout(60)) {
  const std::string pids = "/tmp/herd-shell-pids-" + std::to_string(::getpid());
  std::filesystem::remove(pids);
  herd::LocalCluster cluster = fast_cluster(1);
  const std::string address = cluster.start();
  herd::Client client{address};
  client.wait_for_workers(1, 20s);
  // The command and a child of its own, both long.
  auto f = client.submit(herd::shell, herd::ShellCommand{"echo $$ > " + pids + ".tmp; sleep 300 & echo $! >> " + pids +
                                                         ".tmp; mv " + pids + ".tmp " + pids + "; wait"});
  REQUIRE(eventually([&] { return std::filesystem::exists(pids); }, 20s));
  std::vector<pid_t> command;
  {
    std::ifstream in(pids);
    for (pid_t p; in >> p;) command.push_back(p);
  }
  REQUIRE(command.size() == 2);
  for (pid_t p : command) CHECK(alive(p));
  pid_t worker = 0;
  for (pid_t p : worker_pids(cluster.scheduler_pid())) {
    if (auto st = proc_stat(p); st && st->first == cluster.scheduler_pid()) worker = p;
  }
  REQUIRE(worker != 0);
  ::kill(worker, SIGKILL);
  CHECK(eventually([&] { return !alive(command[0]) && !alive(command[1]); }, 5s));
  std::filesystem::remove(pids);
}

TEST_CASE("Faults.MemoryLimit.CountsWhatAShellTaskStarted" * doctest::timeout(90)) {
  herd::Client client{herd::LocalCluster{1}.worker_args({"--memory-limit", "200M"})};
  // `tail` holds a 300 MB line in memory: the worker itself stays small, its child does not.
  auto f = client.submit(herd::shell, herd::ShellCommand{"head -c 300000000 /dev/zero | tail -n 1 > /dev/null; sleep 30"});
  try {
    (void)f.result(60s);
    FAIL("expected the shell task over the memory limit to fail");
  } catch (const herd::TaskError& e) {
    CHECK(e.type() == "herd::MemoryLimitExceeded");
    CHECK(e.message().find("memory limit of 200 MiB") != std::string::npos);
  }
  // The worker left and was replaced; the next task runs.
  CHECK(client.submit(hog, 20).result(60s) == std::size_t{20} << 20);
}

namespace {
std::size_t length_of(std::string s) { return s.size(); }
HERD_TASK(length_of);

std::string sized(std::int64_t n) { return std::string(static_cast<std::size_t>(n), 'r'); }
HERD_TASK(sized);
}  // namespace

TEST_CASE("Faults.MessageLimit.OnlyTheTaskOverItFails" * doctest::timeout(90)) {
  const std::string journal = "/tmp/herd-limit-" + std::to_string(::getpid()) + ".journal";
  std::filesystem::remove(journal);
  herd::LocalCluster cluster = fast_cluster(2);
  cluster.env("HERD_MAX_MESSAGE_BYTES", std::to_string(1 << 20));  // 1 MiB
  cluster.env("HERD_JOURNAL", journal);
  herd::Client client{std::move(cluster)};
  client.wait_for_workers(2, 20s);
  // An argument of 2 MiB: that task fails with an error naming the limit, before it is sent
  // (the scheduler would have dropped the whole connection).
  auto before = client.submit(length_of, std::string(1000, 'x'));
  auto big = client.submit(length_of, std::string(2 << 20, 'x'));
  auto after = client.submit(length_of, std::string(1000, 'y'));
  try {
    (void)big.result(30s);
    FAIL("a 2 MiB argument went through a 1 MiB limit");
  } catch (const herd::TaskError& e) {
    const std::string what = e.what();
    CHECK(what.find("HERD_MAX_MESSAGE_BYTES=1048576") != std::string::npos);
    CHECK(what.find("its arguments: 2.0 MiB") != std::string::npos);
    CHECK(what.find("over the scheduler's message limit of 1.0 MiB") != std::string::npos);
    MESSAGE(what);
  }
  CHECK(before.result(30s) == 1000);
  CHECK(after.result(30s) == 1000);
  // A scattered value over the limit never passes through the scheduler: the worker fetches it
  // from the client's own data port.
  auto scattered = client.scatter(std::string(3 << 20, 's'));
  CHECK(client.submit(length_of, scattered).result(30s) == (3u << 20));
  CHECK(scattered.result(30s) == std::string(3 << 20, 's'));
  // A keyed result of 3 MiB with the journal on (which keeps keyed results whole when they fit
  // a message): it stays on its worker, and arrives whole.
  auto keyed = client.submit(herd::TaskOptions{}.key("three-mib"), sized, std::int64_t{3 << 20});
  const std::string r = keyed.result(60s);
  CHECK(r.size() == (3u << 20));
  CHECK(r == std::string(3 << 20, 'r'));
  // A small keyed one still goes whole into the journal, and the session never broke.
  auto small = client.submit(herd::TaskOptions{}.key("small"), sized, std::int64_t{100});
  CHECK(small.result(30s).size() == 100);
  CHECK(client.submit(length_of, std::string(10, 'z')).result(30s) == 10);
  std::filesystem::remove(journal);
  std::filesystem::remove(journal + ".lock");
}
