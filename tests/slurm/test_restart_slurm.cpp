// Client::restart() on the one-machine Slurm: every job of the pool is cancelled (scancel) and
// replaced by a new one, a worker stuck in an endless C++ task included.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <herd/herd.hpp>

#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

namespace {
std::string rs_job() {
  const char* v = std::getenv("HERD_JOB_ID");
  return v != nullptr ? v : "none";
}
int rs_endless(int) {
  for (;;) std::this_thread::sleep_for(50ms);
}
int rs_inc(int x) { return x + 1; }
}  // namespace
HERD_TASK(rs_job);
HERD_TASK(rs_endless);
HERD_TASK(rs_inc);

TEST_CASE("Slurm.Restart.EveryJobReplacedEvenWithAStuckTask" * doctest::timeout(300)) {
  if (!slurm_up()) return;
  const std::string name = unique("restart");
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  const std::map<std::string, std::string> before = client.run(rs_job);
  REQUIRE(before.size() == 2);
  auto stuck = client.submit(rs_endless, 1);
  std::this_thread::sleep_for(500ms);
  const auto t0 = std::chrono::steady_clock::now();
  client.restart(120s);
  MESSAGE("restart of 2 Slurm workers (one stuck in a task): "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  CHECK(stuck.status() == "cancelled");
  const std::map<std::string, std::string> after = client.run(rs_job);
  CHECK(after.size() == 2);
  std::set<std::string> old_jobs;
  for (const auto& [w, job] : before) old_jobs.insert(job);
  for (const auto& [w, job] : after) {
    CHECK(before.count(w) == 0);
    CHECK(old_jobs.count(job) == 0);  // new Slurm jobs
  }
  CHECK(client.submit(rs_inc, 1).result(30s) == 2);
  // The old jobs leave the queue (scancel); only the new ones stay.
  const auto t1 = std::chrono::steady_clock::now();
  std::map<std::string, std::string> q;
  while (std::chrono::steady_clock::now() - t1 < 60s) {
    q = queued(name);
    bool old_left = true;
    for (const auto& [id, state] : q) old_left = old_left && old_jobs.count(id) == 0;
    if (old_left) break;
    std::this_thread::sleep_for(200ms);
  }
  for (const auto& [id, state] : q) CHECK(old_jobs.count(id) == 0);
}
