// Client::status() and `herd status` against the one-machine Slurm (scripts/local-slurm.sh):
// workers with their job ids and walltime left, and a pool's jobs with Slurm's own state and
// pending reason (the node has 16 CPUs: a third 8-core job waits for Resources).
#include <doctest/doctest.h>

#include <cstdio>

#include <herd/herd.hpp>

#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

TEST_CASE("Slurm.Status.WorkersJobsAndPendingReasons" * doctest::timeout(180)) {
  if (!slurm_up()) return;
  const std::string name = unique("status");
  herd::Client client{herd::SlurmCluster{options(name).cores(8)}};
  client.scale(3);
  client.wait_for_workers(2, 120s);
  herd::ClusterStatus s;
  const bool settled = eventually([&] {
    s = client.status();
    std::size_t pending = 0;
    for (const auto& j : s.jobs) pending += j.state == "pending" && !j.reason.empty() && j.reason != "None";
    return s.workers.size() == 2 && pending == 1;
  }, 60s);
  REQUIRE_MESSAGE(settled, s.to_text());
  MESSAGE(s.to_text());
  for (const auto& w : s.workers) {
    CHECK(!w.job_id.empty());
    CHECK(w.pool == "default");
    CHECK(w.nthreads == 8);
    CHECK(w.time_left_s > 0);
    CHECK(w.time_left_s <= 600);  // walltime 00:10:00
  }
  REQUIRE(s.pools.size() == 1);
  CHECK(s.pools[0].kind == "slurm");
  CHECK(s.pools[0].running == 2);
  CHECK(s.pools[0].pending == 1);
  CHECK(s.pools[0].pending_reasons.count("Resources") == 1);
  REQUIRE(s.jobs.size() == 3);
  std::size_t running_with_worker = 0;
  for (const auto& j : s.jobs) {
    CHECK(j.pool == "default");
    if (j.state == "running") {
      CHECK(j.detail == "RUNNING");
      running_with_worker += !j.worker.empty();
    } else {
      CHECK(j.detail == "PENDING");
      CHECK(j.reason == "Resources");
    }
  }
  CHECK(running_with_worker == 2);
  // The text the CLI prints shows the same.
  const std::string text = s.to_text();
  CHECK(text.find("1 pending (Resources)") != std::string::npos);
  CHECK(text.find("PENDING") != std::string::npos);
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}
