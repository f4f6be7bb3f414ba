// A checkpointing task preempted twice with `scancel --signal`, on the one-machine Slurm (issue
// 20): each time the job of the worker running it gets SIGTERM (the worker drains:
// this_task().draining() turns true), the task saves and gives up, its retry resumes from the
// checkpoint on another worker, and the pool replaces the preempted job. The value is exact and
// at most one interval is lost per preemption.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <herd/herd.hpp>

#include "support/checkpoint_task.hpp"
#include "support/process_util.hpp"
#include "support/slurm_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

HERD_TASK(ckpt_sum);

namespace {

constexpr std::int64_t kSteps = 60;     // intervals
constexpr int kIntervalMs = 100;        // ~6 s of work in all
constexpr std::int64_t kDrainS = 20;    // a worker's drain grace on a signal (HERD_DRAIN_GRACE_MS)

/// The batch job of the worker named `worker`, as the scheduler knows it ("" = not connected).
std::string job_of(herd::Client& client, const std::string& worker) {
  for (const auto& w : client.status().workers) {
    if (w.name == worker) return w.job_id;
  }
  return "";
}

std::string sacct_state(const std::string& id) {
  auto r = run({"sacct", "--noheader", "--parsable2", "--allocations", "--format=State", "--jobs=" + id});
  return r.stdout_tail.substr(0, r.stdout_tail.find('\n'));
}

}  // namespace

TEST_CASE("Slurm.Checkpoint.PreemptedTwiceByScancelSignalResumesExact" * doctest::timeout(360)) {
  if (!slurm_up()) return;
  const std::string name = unique("ckpt");
  // On the shared filesystem in a real cluster; here every job runs on this machine.
  const std::string dir = "/tmp/herd-slurm-ckpt-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string runs_file = dir + "/ckpt-slurm.runs";
  const std::string intervals_file = dir + "/ckpt-slurm.intervals";
  herd::Client client{herd::SlurmCluster{options(name)}};
  client.scale(2);
  client.wait_for_workers(2, 120s);
  auto f = client.submit(herd::TaskOptions{}.key("ckpt-slurm").checkpointable(3), ckpt_sum, dir, kSteps, kIntervalMs);

  std::vector<std::string> preempted;  // job ids, in order
  for (std::size_t round = 1; round <= 2; ++round) {
    // Run `round` is under way, 10 intervals in.
    REQUIRE_MESSAGE(eventually([&] {
      const auto runs = marks(runs_file);
      return runs.size() == round && count_on(marks(intervals_file), runs.back().worker) >= 10;
    }, 180s), "run " << round << " did not start 10 intervals");
    const std::string worker = marks(runs_file).back().worker;
    const std::string job = job_of(client, worker);
    REQUIRE_MESSAGE(!job.empty(), "no job id for worker " << worker);
    REQUIRE(std::find(preempted.begin(), preempted.end(), job) == preempted.end());
    // Preemption as a user or an administrator does it: SIGTERM to the job's processes. --full
    // reaches the batch step, where the worker runs (the job script execs it, or forwards the
    // signal to the workers it started); without it scancel signals only srun steps.
    const auto r = run({"scancel", "--full", "--signal=TERM", job});
    REQUIRE_MESSAGE(r.exit_code == 0, r.stderr_tail);
    preempted.push_back(job);
  }
  CHECK(f.result(240s) == sum_of_squares(kSteps));

  // Three runs, on three workers: from scratch, then twice from the checkpoint.
  const auto runs = marks(runs_file);
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].value == 0);
  CHECK(runs[1].value >= 9);                 // 10 intervals had started before each preemption
  CHECK(runs[2].value >= runs[1].value + 9);
  CHECK(runs[0].worker != runs[1].worker);
  CHECK(runs[1].worker != runs[2].worker);
  CHECK(runs[0].worker != runs[2].worker);
  // Each preempted run saw draining(), with the time its worker's drain leaves it.
  const auto drained = marks(dir + "/ckpt-slurm.drained");
  REQUIRE(drained.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(drained[i].worker == runs[i].worker);
    CHECK(drained[i].value > 0);
    CHECK(drained[i].value <= kDrainS);
  }
  // At most one interval lost per preemption: what run i started beyond what run i+1 resumed at.
  const auto intervals = marks(intervals_file);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto started = static_cast<std::int64_t>(count_on(intervals, runs[i].worker));
    const std::int64_t kept = runs[i + 1].value - runs[i].value;
    CHECK_MESSAGE(started - kept >= 0, "run " << i << " started " << started << ", kept " << kept);
    CHECK_MESSAGE(started - kept <= 1, "run " << i << " started " << started << ", kept " << kept);
  }
  CHECK(static_cast<std::int64_t>(count_on(intervals, runs[2].worker)) == kSteps - runs[2].value);
  CHECK(static_cast<std::int64_t>(intervals.size()) <= kSteps + 2);

  // The preempted workers left by themselves (their jobs completed, not cancelled or killed),
  // and the pool replaced both jobs.
  for (const auto& job : preempted) {
    CHECK_MESSAGE(eventually([&] { return !queued(name).count(job); }, 90s), "job " << job << " still queued");
    CHECK_MESSAGE(eventually([&] { return sacct_state(job) == "COMPLETED"; }, 30s),
                  "job " << job << " ended " << sacct_state(job));
  }
  CHECK(eventually([&] {
    const auto now = queued(name);
    return now.size() == 2 && count_state(now, "RUNNING") == 2;
  }, 120s));
  CHECK(eventually([&] { return client.n_workers() == 2; }, 90s));
  std::filesystem::remove_all(dir);
}
