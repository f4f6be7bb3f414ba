// Faults that come from Slurm, on the one-machine cluster: the walltime warning signal under
// load, scontrol requeue, a node going down, and the scheduler dying.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <numeric>
#include <thread>

#include <herd/herd.hpp>

#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {

int slow_double(int x) {
  std::this_thread::sleep_for(200ms);
  return 2 * x;
}
HERD_TASK(slow_double);

std::vector<int> iota_n(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void check_doubled(const std::vector<int>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == 2 * static_cast<int>(i));
}

std::string sacct_state(const std::string& id) {
  auto r = run({"sacct", "--noheader", "--parsable2", "--allocations", "--format=State", "--jobs=" + id});
  return r.stdout_tail.substr(0, r.stdout_tail.find('\n'));
}

/// Brings the node back whatever happens in the test.
struct NodeGuard {
  std::string node;
  ~NodeGuard() { run({"scontrol", "update", "nodename=" + node, "state=resume"}); }
};

/// Two Slurm workers busy with `tasks` tasks; `victim` is one of their jobs.
struct Loaded {
  std::string name;
  herd::Client client;
  std::string victim;
  std::vector<herd::Future<int>> futures;
  Loaded(const std::string& what, int tasks) : name(unique(what)), client(herd::SlurmCluster{options(name)}) {
    client.scale(2);
    client.wait_for_workers(2, 120s);
    const auto jobs = queued(name);
    REQUIRE(jobs.size() == 2);
    victim = jobs.begin()->first;
    futures = client.map(slow_double, iota_n(tasks));
    std::this_thread::sleep_for(500ms);  // under load (not a correctness wait)
  }
};

}  // namespace

TEST_CASE("SlurmFaults.WarningSignal.DrainsWithoutLoss" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  Loaded run_{"warn", 60};
  auto& [name, client, victim, fs] = run_;
  // What Slurm does at --signal=B:TERM@secs: the batch step gets the signal, the job goes on.
  REQUIRE(run({"scancel", "--batch", "--signal=TERM", victim}).exit_code == 0);
  check_doubled(client.gather(fs));  // nothing failed, nothing lost
  // The worker left by itself and its job ended cleanly (not cancelled, not killed).
  CHECK(eventually([&] { return !queued(name).count(victim); }, 60s));
  CHECK(eventually([&] { return sacct_state(victim) == "COMPLETED"; }, 30s));
  CHECK(eventually([&] { return client.n_workers() == 2; }, 90s));  // and it was replaced
}

TEST_CASE("SlurmFaults.Requeue.NewIncarnationRejoins" * doctest::timeout(240)) {
  if (!slurm_up()) return;
  Loaded run_{"requeue", 60};
  auto& [name, client, victim, fs] = run_;
  REQUIRE(run({"scontrol", "requeue", victim}).exit_code == 0);
  check_doubled(client.gather(fs));
  // The requeued job runs again under the same id: a new incarnation, a new worker; the pool
  // does not cancel it, and does not submit a third job meanwhile.
  CHECK(eventually([&] {
    const auto now = queued(name);
    return now.count(victim) && now.at(victim) == "RUNNING" && now.size() == 2;
  }, 120s));
  CHECK(eventually([&] { return client.n_workers() == 2; }, 60s));
  CHECK(queued(name).size() == 2);
  check_doubled(client.gather(client.map(slow_double, iota_n(10))));
}

TEST_CASE("SlurmFaults.NodeDown.PoolRecovers" * doctest::timeout(240)) {
  if (!slurm_up()) return;
  Loaded run_{"nodedown", 40};
  auto& [name, client, victim, fs] = run_;
  const std::string nodes = run({"sinfo", "--noheader", "--format=%n"}).stdout_tail;
  const std::string node = nodes.substr(0, nodes.find('\n'));
  NodeGuard guard{node};
  REQUIRE(run({"scontrol", "update", "nodename=" + node, "state=down", "reason=herd-test"}).exit_code == 0);
  std::this_thread::sleep_for(2s);  // the node stays down a while, as a failed node would
  // Back: by hand, or by itself when slurmd re-registers (ReturnToService=2).
  run({"scontrol", "update", "nodename=" + node, "state=resume"});
  CHECK(eventually([&] {
    const std::string s = run({"sinfo", "--noheader", "--nodes=" + node, "--format=%T"}).stdout_tail;
    return s.find("down") == std::string::npos && s.find("drain") == std::string::npos;
  }, 60s));
  check_doubled(client.gather(fs));  // rerun on the new workers once the node is back
  CHECK(eventually([&] { return client.n_workers() == 2; }, 120s));
}

TEST_CASE("SlurmFaults.SchedulerKilled.ClientsErrorNoJobLeft" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("schedkill");
  herd::SlurmCluster cluster{options(name)};
  cluster.scheduler_env("HERD_TIMEOUT_MS", "3000");
  const std::string address = cluster.start();
  const pid_t scheduler = cluster.scheduler_pid();
  {
    herd::Client client{address};
    client.scale(2);
    client.wait_for_workers(2, 120s);
    auto fs = client.map(slow_double, iota_n(20));
    REQUIRE(::kill(scheduler, SIGKILL) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(client.gather(fs), herd::ConnectionError);
    CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  }
  // The workers notice the silence and exit; their jobs end with them.
  CHECK(eventually([&] { return queued(name).empty(); }, 30s));
  cluster.close();  // and whatever the scheduler recorded is cancelled
  CHECK(queued(name).empty());
}
