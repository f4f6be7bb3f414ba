// Checkpointable tasks when the pool shrinks (issue 20): the scheduler tells the worker it
// retires (message `retiring`), so the task running there sees this_task().draining() with the
// seconds the grace leaves it, saves and gives up; its retry on the worker that stays resumes
// from the checkpoint. Real processes on loopback.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <herd/herd.hpp>

#include "support/checkpoint_task.hpp"
#include "support/process_util.hpp"

using namespace std::chrono_literals;
using namespace herd::testing;

HERD_TASK(ckpt_sum);

namespace {
constexpr std::int64_t kSteps = 60;        // intervals of each task
constexpr int kIntervalMs = 50;            // ~3 s of work per task
constexpr std::int64_t kGraceS = 30;       // the scheduler's retire_grace_s (its default)
}  // namespace

namespace {
/// Two checkpointable tasks on two workers; the pool shrinks to one. `isolated`: each runs in a
/// child process of its worker (TaskOptions::isolated), which must see draining() turn true
/// too, though the worker starts draining after the child started.
void shrink_while_two_run(bool isolated) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("herd-ckpt-shrink-" + std::to_string(::getpid()) + (isolated ? "-iso" : ""))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  herd::Client client{herd::LocalCluster{2}};
  client.wait_for_workers(2, 60s);
  auto a = client.submit(herd::TaskOptions{}.key("ckpt-a").checkpointable(2).isolated(isolated), ckpt_sum, dir, kSteps,
                         kIntervalMs);
  auto b = client.submit(herd::TaskOptions{}.key("ckpt-b").checkpointable(2).isolated(isolated), ckpt_sum, dir, kSteps,
                         kIntervalMs);
  // Both under way, one on each worker, well before their end.
  REQUIRE(eventually([&] {
    return marks(dir + "/ckpt-a.intervals").size() >= 10 && marks(dir + "/ckpt-b.intervals").size() >= 10;
  }, 60s));
  const auto first_a = marks(dir + "/ckpt-a.runs");
  const auto first_b = marks(dir + "/ckpt-b.runs");
  REQUIRE(first_a.size() == 1);
  REQUIRE(first_b.size() == 1);
  REQUIRE(first_a[0].worker != first_b[0].worker);

  client.scale(1);  // one of the two busy workers retires
  CHECK(a.result(90s) == sum_of_squares(kSteps));
  CHECK(b.result(90s) == sum_of_squares(kSteps));

  // Exactly one task was preempted: the one on the retired worker, which now is gone.
  const auto runs_a = marks(dir + "/ckpt-a.runs");
  const auto runs_b = marks(dir + "/ckpt-b.runs");
  INFO("runs of ckpt-a:\n" << read_file(dir + "/ckpt-a.runs") << "runs of ckpt-b:\n" << read_file(dir + "/ckpt-b.runs")
       << "drained:\n" << read_file(dir + "/ckpt-a.drained") << read_file(dir + "/ckpt-b.drained"));
  REQUIRE(runs_a.size() + runs_b.size() == 3);
  const bool a_moved = runs_a.size() == 2;
  const std::string key = a_moved ? "ckpt-a" : "ckpt-b";
  const std::string kept = a_moved ? "ckpt-b" : "ckpt-a";
  const auto& runs = a_moved ? runs_a : runs_b;
  const std::string retired = runs[0].worker;
  const std::string staying = runs[1].worker;
  CHECK(retired != staying);
  CHECK(runs[0].value == 0);
  CHECK(eventually([&] { return client.status().workers.size() == 1; }, 30s));
  const auto status = client.status();
  REQUIRE(status.workers.size() == 1);
  CHECK(status.workers[0].name == staying);

  // It saw draining() with what the grace left it, while the other task never did.
  const auto drained = marks(dir + "/" + key + ".drained");
  REQUIRE(drained.size() == 1);
  CHECK(drained[0].worker == retired);
  CHECK(drained[0].value > 0);
  CHECK(drained[0].value <= kGraceS);
  CHECK(marks(dir + "/" + kept + ".drained").empty());

  // Resumed where its checkpoint was: at most the interval it was in was lost, and the retry
  // ran the rest, each interval once.
  const auto intervals = marks(dir + "/" + key + ".intervals");
  const std::int64_t before = static_cast<std::int64_t>(count_on(intervals, retired));
  const std::int64_t after = static_cast<std::int64_t>(count_on(intervals, staying));
  CHECK(runs[1].value >= 9);                 // 10 intervals had started before the shrink
  CHECK(before - runs[1].value >= 0);
  CHECK(before - runs[1].value <= 1);        // at most one interval lost
  CHECK(after == kSteps - runs[1].value);    // the rest, each once
  CHECK(static_cast<std::int64_t>(intervals.size()) <= kSteps + 1);
  // The task on the staying worker ran once, every interval once.
  CHECK(static_cast<std::int64_t>(marks(dir + "/" + kept + ".intervals").size()) == kSteps);
  std::filesystem::remove_all(dir);
}
}  // namespace

TEST_CASE("Checkpoint.PoolShrinks.RetiredWorkersTaskSavesAndResumesOnTheOther" * doctest::timeout(120)) {
  shrink_while_two_run(false);
}

TEST_CASE("Checkpoint.PoolShrinks.IsolatedTaskSeesTheDrainToo" * doctest::timeout(120)) {
  shrink_while_two_run(true);
}
