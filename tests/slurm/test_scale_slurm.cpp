// Scaling from the shell on the one-machine Slurm: `herd pools`, `herd scale`, `herd adapt`,
// `herd pool pause|resume`, `herd worker retire` against a `herd scheduler --config` whose
// pool's log directory does not exist yet; and scale-down that keeps no worker for data safe
// elsewhere: an adaptive pool goes back to its minimum while the client still holds futures
// whose values it has, and keeps a worker (saying so) for a result only that worker holds.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <herd/herd.hpp>

#include "common/util.hpp"
#include "support/process_util.hpp"
#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;
namespace fs = std::filesystem;

namespace {

int nap_value(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
HERD_TASK(nap_value);

int plus_one(int v) { return v + 1; }
HERD_TASK(plus_one);

/// A result too big to travel with the task's update (over the 4 KiB inline limit): only its
/// worker holds it until the client fetches it.
std::string big_result(int n) { return std::string(static_cast<std::size_t>(n), 'r'); }
HERD_TASK(big_result);

std::string cli() { return herd_cli_path(); }

struct Ran {
  int rc = 0;
  std::string out;  // stdout and stderr
};

Ran herd_cli(const std::string& args) {
  Ran r;
  r.out = run_command(herd::util::shell_quote(cli()) + " " + args + " 2>&1", &r.rc);
  return r;
}

}  // namespace

TEST_CASE("Slurm.ScaleFromTheShell.PoolsScaleCoresPauseResumeRetireAdapt" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("scalecli");
  const std::string dir = "/tmp/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The log directory and its parent are missing: the scheduler makes them (Slurm would not).
  const std::string logs = dir + "/logs/nested";
  std::ofstream(dir + "/cluster.toml") << "[pool.cpu]\npartition = \"cpu\"\ncores = 1\nmemory = \"300M\"\n"
                                       << "walltime = \"00:10:00\"\njob_name = \"" << name << "\"\n"
                                       << "log_directory = \"" << logs << "\"\n";
  const auto [sched, address] = start_scheduler({cli(), "scheduler", "--config", dir + "/cluster.toml", "--no-dashboard"},
                                                dir + "/scheduler.log");
  const std::string at = " --scheduler " + address;
  herd::Client client{address};

  Ran r = herd_cli("pools" + at);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("cpu ") != std::string::npos);
  CHECK(r.out.find("slurm") != std::string::npos);

  // Unknown names: errors naming the known ones.
  r = herd_cli("scale nope 2" + at);
  CHECK(r.rc == 1);
  CHECK(r.out.find("no pool named 'nope'; the pools are: cpu") != std::string::npos);
  r = herd_cli("pool pause nope" + at);
  CHECK(r.rc == 1);
  CHECK(r.out.find("the pools are: cpu") != std::string::npos);

  r = herd_cli("scale cpu 2" + at);
  CHECK(r.rc == 0);
  CHECK(r.out.find("pool cpu: 0 → 2 workers (2 jobs submitted)") != std::string::npos);
  client.wait_for_workers(2, 120s);
  CHECK(queued(name).size() == 2);
  struct stat st{};
  REQUIRE(::stat(logs.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  // Cores: one core per job, so 3 cores are 3 jobs.
  r = herd_cli("scale cpu --cores 3" + at);
  CHECK(r.out.find("pool cpu: 2 → 3 workers (1 job submitted)") != std::string::npos);
  CHECK(herd_cli("scale cpu --memory 1G" + at).out.find("pool cpu: 3 → 4 workers (1 job submitted)") !=
        std::string::npos);  // 300M per job: 4 jobs hold 1G
  client.wait_for_workers(4, 120s);

  // Paused: a new size is taken, no job is submitted until resumed.
  r = herd_cli("pool pause cpu" + at);
  CHECK(r.out.find("pool cpu is paused") != std::string::npos);
  r = herd_cli("scale cpu 5" + at);
  CHECK(r.out.find("pool cpu: 4 → 5 workers\n") != std::string::npos);  // nothing submitted
  CHECK(r.out.find("is paused") != std::string::npos);
  CHECK(herd_cli("pools" + at).out.find("paused (herd pool resume cpu)") != std::string::npos);
  CHECK(queued(name).size() == 4);
  r = herd_cli("pool resume cpu" + at);
  CHECK(r.out.find("pool cpu: 5 → 5 workers (1 job submitted)") != std::string::npos);
  client.wait_for_workers(5, 120s);

  // One worker retired by name: it leaves, its job goes, and the fixed pool does not replace it.
  r = herd_cli("worker retire nobody" + at);
  CHECK(r.rc == 1);
  CHECK(r.out.find("no worker named 'nobody'; the workers are: ") != std::string::npos);
  const std::string victim = client.status().workers.at(0).name;
  r = herd_cli("worker retire " + herd::util::shell_quote(victim) + at);
  CHECK(r.rc == 0);
  CHECK(r.out.find("worker " + victim + " retires: it runs no task") != std::string::npos);
  CHECK(r.out.find("pool cpu: 5 → 4 workers") != std::string::npos);
  CHECK(eventually([&] { return client.n_workers() == 4 && queued(name).size() == 4; }, 60s));
  bool gone = true;
  for (const auto& w : client.status().workers) gone = gone && w.name != victim;
  CHECK(gone);

  // Adaptive, minimum 1: with no work the pool goes down to one worker and one job.
  r = herd_cli("adapt cpu --min 1 --max 3 --idle-timeout 2" + at);
  CHECK(r.rc == 0);
  CHECK(r.out.find("pool cpu: adaptive 1-3 workers") != std::string::npos);
  CHECK(eventually([&] { return client.n_workers() == 1 && queued(name).size() == 1; }, 90s));
  CHECK(herd_cli("adapt cpu --min 3 --max 1" + at).rc == 2);

  r = herd_cli("scale cpu 0" + at);
  CHECK(r.out.find("pool cpu: 1 → 0 workers") != std::string::npos);
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
  ::kill(sched, SIGTERM);
  fs::remove_all(dir);
}

TEST_CASE("Slurm.ScaleDown.BackToTheMinimumWhileTheClientHoldsTheValuesOfItsFutures" * doctest::timeout(300)) {
  // The repro: adapt(0, 4, idle 5 s), 40 one-second tasks, gather, and the futures
  // kept. Every value is in the client's hands, so no worker is kept for them: the jobs go back
  // to 0, and nothing is computed again. A later task that takes one as input computes it again.
  if (!slurm_up()) return;
  const std::string name = unique("scaledata");
  herd::Client client{herd::SlurmCluster{options(name)}};
  const herd::PoolChange c = client.adapt(0, 4, "", 5s);
  CHECK(c.adaptive);
  CHECK(c.maximum == 4);
  auto fs = client.map(nap_value, std::vector<int>(40, 1000));
  int most = 0;
  CHECK(eventually([&] {
    most = std::max(most, client.n_workers());
    return most == 4 || client.wait(fs, 0ms);
  }, 120s));
  for (int v : client.gather(fs)) CHECK(v == 1000);
  CHECK(queued(name).size() <= 4);
  // fs still held: back to 0 jobs, 0 workers.
  CHECK(eventually([&] { return client.n_workers() == 0 && queued(name).empty(); }, 60s));
  const herd::ClusterStatus s = client.status();
  CHECK(s.functions.at("nap_value").at("finished_total") == 40);  // none computed again
  for (const auto& p : s.pools) CHECK(p.kept_for_data.empty());
  CHECK(client.explain(fs[0]).summary.find("its client holds the value") != std::string::npos);
  CHECK(fs[0].result() == 1000);  // still in the client's hands
  // A task that takes one as input: the pool grows again, the input is computed again first.
  CHECK(client.submit(plus_one, fs[0]).result() == 1001);
  CHECK(client.status().functions.at("nap_value").at("finished_total") == 41);
  CHECK(eventually([&] { return client.n_workers() == 0 && queued(name).empty(); }, 60s));
}

TEST_CASE("Slurm.ScaleDown.AWorkerHoldingAResultOnlyItHasIsKeptAndSaysSo" * doctest::timeout(300)) {
  // Results of 64 KiB stay on their worker until fetched. adapt(0, 1): the one worker is idle
  // but holds them, with no other worker to take them: it is kept, and `herd status`, `herd
  // explain`, `herd pools` and what adapt returns say so with what it holds. Released, it goes.
  if (!slurm_up()) return;
  const std::string name = unique("scalekept");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.adapt(0, 1, "", 2s);
  std::vector<herd::Future<std::string>> fs;
  for (int i = 0; i < 2; ++i) fs.push_back(client.submit(big_result, 64 << 10));
  client.wait(fs);
  std::string kept;
  CHECK(eventually([&] {
    const auto s = client.status();
    for (const auto& w : s.workers) kept += w.kept_for_data;
    return !kept.empty();
  }, 60s));
  CHECK(kept.find("2 result(s) only it has (128 KiB)") != std::string::npos);
  CHECK(client.n_workers() == 1);
  CHECK(queued(name).size() == 1);
  const std::string text = client.status().to_text();
  CHECK(text.find("kept for data: its pool would let it go, but it holds 2 result(s)") != std::string::npos);
  CHECK(client.explain(fs[0]).summary.find("is kept for data") != std::string::npos);
  const herd::PoolChange again = client.adapt(0, 1, "", 2s);
  REQUIRE(again.kept_for_data.size() == 1);
  CHECK(again.kept_for_data[0].find("holds 2 result(s) only it has") != std::string::npos);
  CHECK(again.to_text().find("kept for data: ") != std::string::npos);
  CHECK(fs[1].result().size() == (64u << 10));
  fs.clear();  // released: nothing left to keep the worker for
  CHECK(eventually([&] { return client.n_workers() == 0 && queued(name).empty(); }, 60s));
}
