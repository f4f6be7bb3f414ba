// Job output against the one-machine Slurm (scripts/local-slurm.sh): a pool whose job script
// fails before the worker starts (a broken prologue). The user sees why without looking for
// files: the end of the job's output file reaches the pool's last_failure, `herd status`'s
// job detail, wait_for_workers' error and `herd logs JOB`.
#include <doctest/doctest.h>

#include <herd/herd.hpp>

#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

TEST_CASE("Slurm.Logs.FailedStartShowsTheJobsOutput" * doctest::timeout(240)) {
  if (!slurm_up()) return;
  const std::string name = unique("logs");
  herd::Client client{herd::SlurmCluster{
      options(name).job_script_prologue({"echo BROKEN-SETUP-$SLURM_ARRAY_TASK_ID >&2", "exit 3"})}};
  client.scale(1);
  // The pool reads the failed job's output file and says what it says.
  std::string failure;
  const bool seen = eventually([&] {
    const auto pools = client.pools();
    failure = pools.empty() ? "" : pools[0].last_failure;
    return failure.find("BROKEN-SETUP-0") != std::string::npos;
  }, 120s);
  REQUIRE_MESSAGE(seen, failure);
  MESSAGE(failure);
  CHECK(failure.find("FAILED") != std::string::npos);
  CHECK(failure.find("exit code 3:0") != std::string::npos);
  CHECK(failure.find("before its worker connected") != std::string::npos);
  // herd status: the failed job, its file and the end of it
  const herd::ClusterStatus s = client.status();
  std::string job_id;
  for (const auto& j : s.jobs) {
    if (j.state != "ended") continue;
    job_id = j.id;
    CHECK(j.detail == "FAILED");
    CHECK(j.output.find("/tmp/herd-slurm-test-logs/" + name + "-") == 0);
    std::string tail;
    for (const auto& l : j.output_tail) tail += l + "\n";
    CHECK_MESSAGE(tail.find("BROKEN-SETUP-0") != std::string::npos, tail);
  }
  REQUIRE_MESSAGE(!job_id.empty(), s.to_text());
  const std::string text = s.to_text();
  CHECK_MESSAGE(text.find("| BROKEN-SETUP-0") != std::string::npos, text);
  // Waiting for workers that cannot come says why.
  try {
    client.wait_for_workers(1, 5s);
    FAIL("expected an error");
  } catch (const herd::Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find("BROKEN-SETUP") != std::string::npos, e.what());
  }
  // herd logs JOB: the job's output files (.out and .err)
  const auto logs = client.logs(job_id);
  REQUIRE(!logs.empty());
  std::string all;
  for (const auto& l : logs) {
    CHECK(l.kind == "job");
    all += l.to_text();
  }
  CHECK_MESSAGE(all.find("BROKEN-SETUP-0") != std::string::npos, all);
  CHECK_MESSAGE(all.find(".err <==") != std::string::npos, all);
  client.close();
  CHECK(eventually([&] { return queued(name).empty(); }, 60s));
}
