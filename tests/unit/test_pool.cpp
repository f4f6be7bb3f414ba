// The pool policy (scale, adapt, replacement, pause) against a fake batch system.
#include <doctest/doctest.h>

#include "herd/error.hpp"
#include "scheduler/pool.hpp"
#include "support/fake_job_queue.hpp"

using herd::scheduler::Pool;
using herd::scheduler::PoolPolicy;
using herd::scheduler::PoolWorker;
using herd::testing::FakeJobQueue;
using State = herd::jobqueue::JobState;

namespace {
Pool make(FakeJobQueue::State& s, PoolPolicy p = {}) {
  p.name = "cpu";
  return Pool(p, std::make_unique<FakeJobQueue>(s));
}
void run_all(FakeJobQueue::State& s) {
  for (auto& [id, j] : s.jobs) j.state = State::running;
}
}  // namespace

TEST_CASE("Pool.Scale.OneSubmissionPerStepAndPendingCancelledFirst") {
  FakeJobQueue::State s;
  Pool pool = make(s);
  pool.scale(4);
  CHECK(pool.step(0, -1, {}).empty());
  CHECK(s.submissions == std::vector<std::size_t>{4});  // bulk: one call for four jobs
  (void)pool.poll();
  CHECK(pool.step(0, -1, {}).empty());
  CHECK(s.submissions.size() == 1);  // pending jobs count: no oversubmission
  // Two run (with workers), two still pend; scale(1): the pending go first, then one worker.
  s.jobs["job0"].state = State::running;
  s.jobs["job1"].state = State::running;
  (void)pool.poll();
  pool.scale(1);
  std::vector<PoolWorker> workers = {{1, "job0", true, {}, false}, {2, "job1", true, {}, false}};
  const auto retire = pool.step(0, -1, workers);
  CHECK(s.cancelled == std::vector<std::string>{"job3", "job2"});
  CHECK(retire.size() == 1);  // one running worker retires gracefully (not scancelled yet)
}

TEST_CASE("Pool.Replaces.EndedAndLeavingJobs") {
  FakeJobQueue::State s;
  Pool pool = make(s);
  pool.scale(2);
  (void)pool.step(0, -1, {});
  run_all(s);
  (void)pool.poll();
  s.jobs["job0"].state = State::ended;  // e.g. scancel by an admin, NODE_FAIL
  (void)pool.poll();
  (void)pool.step(0, -1, {{2, "job1", false, {}, false}});
  CHECK(s.submissions == std::vector<std::size_t>{2, 1});
  // A worker near its walltime no longer counts: its successor is queued ahead of time.
  run_all(s);
  (void)pool.poll();
  (void)pool.step(0, -1, {{2, "job1", false, {}, true}, {3, "job2", false, {}, false}});
  CHECK(s.submissions == std::vector<std::size_t>{2, 1, 1});
}

TEST_CASE("Pool.Requeue.LostWorkerOfAnEarlierIncarnationKeepsTheJob") {
  FakeJobQueue::State s;
  Pool pool = make(s);
  pool.scale(2);
  (void)pool.step(0, -1, {});
  run_all(s);
  (void)pool.poll();
  const std::vector<PoolWorker> both = {{1, "job0", false, {}, false}, {2, "job1", false, {}, false}};
  (void)pool.step(0, -1, both);
  // Slurm requeues job0 (its node failed) while its worker is still registered, silent.
  s.jobs["job0"].state = State::pending;
  (void)pool.poll();
  (void)pool.step(0, -1, both);
  CHECK(s.submissions == std::vector<std::size_t>{2});  // the requeued job is still capacity
  // It runs again elsewhere, and only then is the old worker declared lost: the job stays.
  s.jobs["job0"].state = State::running;
  (void)pool.poll();
  pool.worker_left("job0");
  CHECK(s.cancelled.empty());
  (void)pool.poll();
  (void)pool.step(0, -1, {{2, "job1", false, {}, false}, {3, "job0", false, {}, false}});
  CHECK(s.submissions == std::vector<std::size_t>{2});
  // The new incarnation's own worker dying is a loss like any other: its job goes.
  pool.worker_left("job0");
  CHECK(s.cancelled == std::vector<std::string>{"job0"});
  // A lost worker of a job never requeued: the job is cancelled, as before.
  pool.worker_left("job1");
  CHECK(s.cancelled == std::vector<std::string>{"job0", "job1"});
}

TEST_CASE("Pool.Failures.PauseInsteadOfStorm") {
  FakeJobQueue::State s;
  s.refuse = "sbatch: error: invalid partition specified: nope";
  Pool pool = make(s);
  pool.scale(3);
  CHECK_THROWS_WITH_AS(pool.step(0, -1, {}), doctest::Contains("nope"), herd::JobQueueError);
  // Immediately again: within the back-off, no new sbatch.
  CHECK_NOTHROW(pool.step(0, -1, {}));
  CHECK(s.submissions.size() == 1);
  CHECK(pool.status(0).last_error.find("nope") != std::string::npos);
  CHECK(pool.status(0).failed_submissions == 1);
  // A new scale() from the user tries again at once; the third failure in a row pauses.
  pool.scale(3);
  CHECK_THROWS(pool.step(0, -1, {}));
  pool.scale(3);
  CHECK_THROWS(pool.step(0, -1, {}));
  CHECK(pool.status(0).paused.find("3 submissions failed") != std::string::npos);
  for (int i = 0; i < 50; ++i) CHECK_NOTHROW(pool.step(0, -1, {}));
  CHECK(s.submissions.size() == 3);
}

TEST_CASE("Pool.Adapt.FollowsBacklogWithinBounds") {
  FakeJobQueue::State s;
  Pool pool = make(s);
  pool.adapt(1, 5, std::chrono::seconds(60));
  (void)pool.step(0, -1, {});
  CHECK(s.submissions == std::vector<std::size_t>{1});  // the minimum, even with no work
  (void)pool.step(100, -1, {});                          // durations unknown: one per task, capped
  CHECK(s.submissions == std::vector<std::size_t>{1, 4});
  CHECK(pool.desired() == 5);
  // Short tasks: 100 tasks of 1 ms need one worker, not five.
  FakeJobQueue::State s2;
  Pool quick = make(s2);
  quick.adapt(0, 5, std::chrono::seconds(60));
  (void)quick.step(100, 1000.0, {});
  CHECK(s2.submissions == std::vector<std::size_t>{1});
  // Busy workers are never retired for having too little backlog; idle ones after the timeout.
  run_all(s2);
  (void)quick.poll();
  const auto long_ago = Pool::Clock::now() - std::chrono::seconds(120);
  CHECK(quick.step(0, 1000.0, {{7, "job0", false, long_ago, false}}).empty());
  CHECK(quick.step(0, 1000.0, {{7, "job0", true, long_ago, false}}) == std::vector<std::uint32_t>{7});
}
