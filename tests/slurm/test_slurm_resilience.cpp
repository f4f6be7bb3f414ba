// Slurm's bad days, for real on the one-machine cluster (scripts/local-slurm.sh): slurmctld
// frozen with SIGSTOP while tasks run, a scancel that takes a second per call, and a job
// prologue that always fails. The scheduler must keep heartbeating, placing tasks and
// answering `status` throughout; a scale-down costs one scancel; a crash loop costs a handful
// of jobs, then pauses the pool with the job's own words until the user scales again.
//
// These tests freeze the shared slurmctld (always resumed by a guard) and put a shim before
// scancel on the scheduler's PATH; they run serially (label slurm, RUN_SERIAL).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include <herd/herd.hpp>

#include "common/process.hpp"
#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;
using Clock = std::chrono::steady_clock;

namespace {

int slow_id(int x) {
  std::this_thread::sleep_for(100ms);
  return x;
}
HERD_TASK(slow_id);

std::vector<int> iota_n(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// slurmctld's pid, from the private cluster's pid file.
pid_t slurmctld_pid() {
  const std::string dir = env_value("HERD_SLURM_DIR", "/tmp/herd-slurm");
  std::ifstream in(dir + "/run/slurmctld.pid");
  pid_t pid = 0;
  in >> pid;
  return pid;
}

/// Resumes a stopped process whatever happens in the test.
struct Resume {
  pid_t pid = 0;
  ~Resume() {
    if (pid > 0) ::kill(pid, SIGCONT);
  }
};

/// The worker process of Slurm job `job` (its environment says HERD_JOB_ID=job, HERD_ROLE=worker).
pid_t worker_pid_of(const std::string& job) {
  const std::string self = herd::process::self_executable();
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path() / "exe", ec) != self || ec) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(std::string("HERD_JOB_ID=") + job + '\0') != std::string::npos &&
        env.find(std::string("HERD_ROLE=worker") + '\0') != std::string::npos) {
      return static_cast<pid_t>(std::stoi(name));
    }
  }
  return 0;
}

/// Asks for `status` every 100 ms from its own client and keeps the slowest answer, and when
/// each worker was last listed.
struct StatusProbe {
  herd::Client client;
  std::atomic<bool> stop{false};
  std::mutex mu;
  double max_s = 0;
  int samples = 0, failures = 0;
  std::map<std::string, Clock::time_point> last_listed;
  std::thread thread;
  explicit StatusProbe(const std::string& address) : client(address) {
    thread = std::thread([this] {
      while (!stop.load()) {
        const auto t = Clock::now();
        try {
          const auto s = client.status();
          const auto done = Clock::now();
          std::lock_guard lock(mu);
          max_s = std::max(max_s, seconds(done - t));
          ++samples;
          for (const auto& w : s.workers) last_listed[w.name] = done;
        } catch (const std::exception&) {
          std::lock_guard lock(mu);
          ++failures;
        }
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  ~StatusProbe() { finish(); }
  void finish() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

std::set<std::string> worker_names(herd::Client& c) {
  std::set<std::string> out;
  for (const auto& w : c.status().workers) out.insert(w.name);
  return out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

}  // namespace

TEST_CASE("SlurmResilience.FrozenController.NoWorkerLostNoFutureFailsStatusAnswers" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const pid_t ctld = slurmctld_pid();
  REQUIRE_MESSAGE(ctld > 0, "no slurmctld pid file under $HERD_SLURM_DIR/run");
  const std::string name = unique("frozen");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.scale(6);
  client.wait_for_workers(6, 120s);
  const std::set<std::string> before = worker_names(client);
  REQUIRE(before.size() == 6);
  const std::string victim = *before.begin();
  const pid_t victim_pid = worker_pid_of(victim);
  REQUIRE_MESSAGE(victim_pid > 0, "cannot find the process of worker " << victim);
  Resume resume_victim{victim_pid};

  StatusProbe probe(client.scheduler_address());
  auto futures = client.map(slow_id, iota_n(300));
  std::this_thread::sleep_for(1s);  // tasks flow
  // The controller freezes for 25 s: squeue, sacct, sbatch and scancel hang meanwhile.
  Clock::time_point frozen_at, victim_stopped_at;
  {
    Resume resume_ctld{ctld};
    REQUIRE(::kill(ctld, SIGSTOP) == 0);
    frozen_at = Clock::now();
    // A worker stops too (its node hangs): it must still be declared lost on time.
    std::this_thread::sleep_for(2s);
    REQUIRE(::kill(victim_pid, SIGSTOP) == 0);
    victim_stopped_at = Clock::now();
    std::this_thread::sleep_until(frozen_at + 25s);
  }  // SIGCONT
  const auto thawed_at = Clock::now();
  // Every future succeeds, with the right value.
  std::vector<int> out;
  REQUIRE_NOTHROW(out = client.gather(futures));
  for (int i = 0; i < 300; ++i) REQUIRE(out[static_cast<std::size_t>(i)] == i);
  probe.finish();
  // The five others were never lost; the stopped one was, after the heartbeat timeout.
  const std::set<std::string> after = worker_names(client);
  for (const auto& w : before) {
    if (w != victim) CHECK_MESSAGE(after.count(w) == 1, "worker " << w << " was lost");
  }
  CHECK(after.count(victim) == 0);
  REQUIRE(probe.last_listed.count(victim) == 1);
  const double lost_after = seconds(probe.last_listed[victim] - victim_stopped_at);
  CHECK(lost_after >= 9.0);   // not before the timeout (10 s of silence)...
  CHECK(lost_after <= 12.0);  // ...and not later than a heartbeat round after it
  CHECK(probe.last_listed[victim] < thawed_at);  // while the controller was still frozen
  // `status` answered throughout, and fast.
  CHECK(probe.failures == 0);
  CHECK(probe.samples >= 150);
  CHECK(probe.max_s < 1.0);
  MESSAGE("controller frozen " << seconds(thawed_at - frozen_at) << " s: " << probe.samples << " status calls, slowest "
                               << probe.max_s * 1000 << " ms; the stopped worker was declared lost after "
                               << lost_after << " s");
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}

TEST_CASE("SlurmResilience.SlowScancel.ScaleDownFromSixToTwoIsOneCall" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("scancel");
  const std::string dir = "/tmp/" + name;
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir, path;
    ~Cleanup() {
      ::setenv("PATH", path.c_str(), 1);
      std::filesystem::remove_all(dir);
    }
  } cleanup{dir, env_value("PATH", "/usr/bin:/bin")};
  // scancel on the scheduler's PATH: counts its calls, takes a second each.
  const std::string calls = dir + "/calls";
  {
    std::ofstream shim(dir + "/scancel");
    shim << "#!/bin/sh\necho \"$@\" >> " << calls << "\nsleep 1\nexec /usr/bin/scancel \"$@\"\n";
  }
  std::filesystem::permissions(dir + "/scancel", std::filesystem::perms::owner_all);
  ::setenv("PATH", (dir + ":" + cleanup.path).c_str(), 1);
  // Jobs that outlive their worker (as when an epilogue runs): only scancel ends them.
  {
    std::ofstream wrapper(dir + "/worker");
    wrapper << "#!/bin/sh\n'" << herd::process::self_executable() << "'\nsleep 300\n";
  }
  std::filesystem::permissions(dir + "/worker", std::filesystem::perms::owner_all);
  herd::Client client{herd::SlurmCluster{options(name).worker_executable(dir + "/worker")}};
  client.scale(6);
  client.wait_for_workers(6, 120s);
  {
    auto futures = client.map(slow_id, iota_n(60));
    const auto out = client.gather(futures);
    REQUIRE(out.size() == 60);
  }  // released: no worker holds a result anyone wants
  REQUIRE(lines_of(calls).empty());
  StatusProbe probe(client.scheduler_address());
  const auto t0 = Clock::now();
  client.scale(2);
  CHECK(seconds(Clock::now() - t0) < 1.0);  // nothing to submit: answered at once
  REQUIRE(eventually([&] { return client.n_workers() == 2; }, 60s));
  // The four jobs go in one scancel (after a second of gathering, and a second of scancel).
  REQUIRE(eventually([&] { return count_state(queued(name), "RUNNING") == 2; }, 60s));
  std::this_thread::sleep_for(3s);  // a straggler would have come by now
  probe.finish();
  const auto made = lines_of(calls);
  REQUIRE(made.size() == 1);
  std::istringstream ids(made[0]);
  std::vector<std::string> cancelled{std::istream_iterator<std::string>(ids), std::istream_iterator<std::string>()};
  CHECK(cancelled.size() == 4);
  CHECK(probe.failures == 0);
  CHECK(probe.max_s < 1.0);  // the loop did not wait for the slow scancel
  MESSAGE("scale(2) from 6: " << made.size() << " scancel call for " << cancelled.size() << " jobs; status: "
                              << probe.samples << " calls, slowest " << probe.max_s * 1000 << " ms");
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}

TEST_CASE("SlurmResilience.CrashLoop.APrologueThatExits3CostsAHandfulOfJobs" * doctest::timeout(360)) {
  if (!slurm_up()) return;
  const std::string name = unique("crashloop");
  herd::Client client{herd::SlurmCluster{
      options(name).job_script_prologue({"echo PROLOGUE-FAILS-ON-$SLURM_ARRAY_TASK_ID >&2", "exit 3"})}};
  client.scale(2);  // sbatch accepts: the reply is ok; the jobs then die, again and again
  const auto t0 = Clock::now();
  herd::PoolInfo pool;
  std::string paused_at;
  while (Clock::now() - t0 < 120s) {
    pool = client.pools().at(0);
    if (pool.paused.find("scale() or adapt() resumes") != std::string::npos && paused_at.empty()) {
      paused_at = std::to_string(seconds(Clock::now() - t0));
    }
    std::this_thread::sleep_for(1s);
  }
  // Left alone for 2 minutes: a handful of jobs, each found FAILED, with growing gaps.
  auto r = run({"sacct", "--noheader", "--parsable2", "-X", "--starttime=now-1hour", "--name=" + name,
                "--format=JobID,Submit,State"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.stderr_tail);
  std::map<std::string, int> submits;  // submit time -> jobs
  int jobs = 0;
  std::istringstream in(r.stdout_tail);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++jobs;
    const auto a = line.find('|'), b = line.find('|', a + 1);
    ++submits[line.substr(a + 1, b - a - 1)];
    CHECK_MESSAGE(line.substr(b + 1) == "FAILED", line);
  }
  MESSAGE(jobs << " jobs in 120 s; paused after " << paused_at << " s: " << pool.paused);
  CHECK(jobs >= 4);
  CHECK(jobs <= 8);
  CHECK(pool.submitted == static_cast<std::uint64_t>(jobs));
  // Gaps between submissions grow (sacct's times are to the second: allow one second).
  std::vector<long> times;
  for (const auto& [when, n] : submits) {
    std::tm tm{};
    REQUIRE(::strptime(when.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) != nullptr);
    times.push_back(static_cast<long>(::timegm(&tm)));
  }
  std::sort(times.begin(), times.end());
  REQUIRE(times.size() >= 3);
  for (std::size_t i = 2; i < times.size(); ++i) {
    CHECK_MESSAGE(times[i] - times[i - 1] >= times[i - 1] - times[i - 2] - 1, "gap " << i);
  }
  CHECK(times.back() - times[times.size() - 2] > times[1] - times[0]);
  // Paused, with the reason and the job's own words.
  CHECK(pool.crashes >= 5);
  CHECK(pool.paused.find("jobs in a row ended before their worker connected") != std::string::npos);
  CHECK(pool.paused.find("PROLOGUE-FAILS-ON-") != std::string::npos);
  CHECK(pool.paused.find("exit code 3:0") != std::string::npos);
  CHECK(!paused_at.empty());
  // scale() resumes it: a new submission at once.
  client.scale(2);
  CHECK(eventually([&] { return client.pools().at(0).submitted > static_cast<std::uint64_t>(jobs); }, 10s));
  CHECK(eventually([&] { return client.pools().at(0).paused.find("resumes") == std::string::npos; }, 10s));
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}

namespace {
int sleepy(int seconds) {
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  return seconds;
}
HERD_TASK(sleepy);
}  // namespace

TEST_CASE("SlurmResilience.SuspendedJob.ItsSilentWorkerIsNotChargedADeath" * doctest::timeout(240)) {
  if (!slurm_up()) return;
  const std::string name = unique("suspend");
  // No death allowed: a task on a worker that dies fails at once (KilledWorker). A worker that
  // is silent because Slurm suspended its job did not die of its task.
  herd::Client client{herd::SlurmCluster{options(name)}.scheduler_env("HERD_ALLOWED_FAILURES", "0")};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  auto f = client.submit(sleepy, 15);
  std::string job;
  REQUIRE(eventually([&] {
    for (const auto& w : client.status().workers) {
      if (w.processing > 0) job = w.job_id;
    }
    return !job.empty();
  }, 30s));
  // The pool has seen the job running before it is suspended: running, then suspended, must
  // not read as a requeue (which would leave the job in the queue once its worker is let go).
  REQUIRE(eventually([&] {
    for (const auto& j : client.status().jobs) {
      if (j.id == job && j.detail == "RUNNING") return true;
    }
    return false;
  }, 30s));
  struct Resume {
    std::string job;
    ~Resume() { run({"scontrol", "resume", job}); }
  } resume{job};
  auto r = run({"scontrol", "suspend", job});
  REQUIRE_MESSAGE(r.exit_code == 0, r.stderr_tail);
  // The pool sees it suspended; the worker, silent, is let go without a death; its task runs
  // again on the other worker and succeeds.
  CHECK(eventually([&] { return client.pools().at(0).stalled == 1; }, 20s));
  CHECK(f.result(90s) == 15);
  const auto s = client.status();
  for (const auto& w : s.workers) CHECK(w.job_id != job);
  // The suspended job, whose worker was let go, is cancelled and replaced.
  CHECK(eventually([&] { return queued(name).count(job) == 0; }, 30s));
  CHECK(eventually([&] { return client.n_workers() == 2; }, 60s));
  MESSAGE("job " << job << " suspended; its task ran again elsewhere: " << s.to_text());
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}

TEST_CASE("SlurmResilience.SlowSbatch.JobsItMadeAfterTimingOutAreAdoptedNotDuplicated" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("sbatch-late");
  const std::string dir = "/tmp/" + name;
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir, path;
    ~Cleanup() {
      ::setenv("PATH", path.c_str(), 1);
      ::unsetenv("HERD_COMMAND_TIMEOUT_S");
      std::filesystem::remove_all(dir);
    }
  } cleanup{dir, env_value("PATH", "/usr/bin:/bin")};
  // sbatch makes the jobs, then its answer is 8 s late; the scheduler gives up on it after 2 s.
  const std::string calls = dir + "/calls";
  {
    std::ofstream shim(dir + "/sbatch");
    shim << "#!/bin/sh\necho \"$@\" >> " << calls << "\nout=$(/usr/bin/sbatch \"$@\")\nrc=$?\nsleep 8\necho \"$out\"\nexit $rc\n";
  }
  std::filesystem::permissions(dir + "/sbatch", std::filesystem::perms::owner_all);
  ::setenv("PATH", (dir + ":" + cleanup.path).c_str(), 1);
  ::setenv("HERD_COMMAND_TIMEOUT_S", "2", 1);
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  // No more than asked for: the two made by the sbatch that timed out were adopted, not made again.
  std::this_thread::sleep_for(5s);
  const auto jobs = queued(name);
  CHECK(jobs.size() == 2);
  CHECK(lines_of(calls).size() == 1);
  CHECK(client.n_workers() == 2);
  auto futures = client.map(slow_id, iota_n(20));
  CHECK(client.gather(futures) == iota_n(20));
  MESSAGE("sbatch answered 8 s late (timeout 2 s): " << lines_of(calls).size() << " sbatch call(s), " << jobs.size()
                                                     << " job(s) in the queue, 2 workers");
  client.close();
  // Adopted jobs are cancelled with the rest: none left behind.
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}
