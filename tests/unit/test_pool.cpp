// The pool policy (PoolState: scale, adapt, replacement, one command of each kind at a time,
// batched cancels, submission pauses, crash loops, stalled jobs, a batch system that does not
// answer), event by event with the time given; and the Pool shell against a fake batch system
// whose answers come late, through a real CommandRunner.
#include <doctest/doctest.h>

#include <poll.h>

#include <algorithm>
#include <thread>

#include "jobqueue/command_runner.hpp"
#include "scheduler/pool.hpp"
#include "support/fake_job_queue.hpp"

using herd::jobqueue::CommandRunner;
using herd::jobqueue::JobInfo;
using herd::jobqueue::PollResult;
using herd::jobqueue::SubmitResult;
using herd::scheduler::Pool;
using herd::scheduler::PoolActions;
using herd::scheduler::PoolPolicy;
using herd::scheduler::PoolState;
using herd::scheduler::PoolWorker;
using herd::testing::FakeJobQueue;
using State = herd::jobqueue::JobState;
using Clock = PoolState::Clock;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0 = Clock::now();
Clock::time_point at(double s) { return t0 + std::chrono::milliseconds(static_cast<long long>(s * 1000)); }

PoolPolicy policy() {
  PoolPolicy p;
  p.name = "cpu";
  return p;
}

/// A batch system that answers at once: each step's actions are carried out and answered
/// before step() returns, so that a test follows the policy's decisions over time.
struct Sim {
  PoolState pool{policy()};
  std::map<std::string, JobInfo> jobs;  // the batch system's jobs
  int next = 0;
  std::string refuse;
  std::vector<std::pair<double, std::size_t>> submissions;  // (time, count)
  std::vector<std::vector<std::string>> cancels;
  std::vector<std::string> reads;  // failed jobs whose output the pool asked for
  std::vector<std::pair<std::string, std::string>> ended;
  explicit Sim(PoolPolicy p = policy()) : pool(std::move(p)) {}

  PoolActions step(double t, std::size_t backlog = 0, double avg = -1, const std::vector<PoolWorker>& w = {},
                   const PoolState::HoldsData& holds = {}) {
    PoolActions a = pool.step(at(t), backlog, avg, w, holds);
    if (a.submit > 0) {
      submissions.emplace_back(t, a.submit);
      SubmitResult r;
      if (!refuse.empty()) {
        r.error = refuse;
      } else {
        for (std::size_t i = 0; i < a.submit; ++i) {
          const std::string id = "job" + std::to_string(next++);
          jobs[id] = {id, State::pending, "PENDING", "Priority"};
          r.ids.push_back(id);
        }
      }
      pool.submitted(at(t), r);
    }
    if (a.poll) {
      PollResult r;
      for (auto it = jobs.begin(); it != jobs.end();) {
        r.jobs.push_back(it->second);
        it = it->second.state == State::ended ? jobs.erase(it) : std::next(it);
      }
      for (auto& e : pool.polled(at(t), r)) ended.push_back(e);
    }
    if (!a.cancel.empty()) {
      cancels.push_back(a.cancel);
      for (const auto& id : a.cancel) {
        if (auto it = jobs.find(id); it != jobs.end()) it->second = {id, State::ended, "CANCELLED", ""};
      }
      pool.cancelled(at(t), a.cancel, "");
    }
    for (const auto& id : a.read_output) reads.push_back(id);
    return a;
  }
  void set(const std::string& id, State s, const std::string& detail, const std::string& reason = "") {
    jobs[id] = {id, s, detail, reason};
  }
  void run_all() {
    for (auto& [id, j] : jobs) j = {id, State::running, "RUNNING", ""};
  }
};

PollResult poll_of(std::vector<JobInfo> jobs, std::string error = "") {
  PollResult r;
  r.jobs = std::move(jobs);
  r.error = std::move(error);
  return r;
}
}  // namespace

TEST_CASE("Pool.Scale.OneSubmissionAtATimeAndPendingCancelledFirst") {
  PoolState p(policy());
  p.scale(4);
  CHECK(p.step(at(0), 0, -1, {}).submit == 4);  // bulk: one call for four jobs
  CHECK(p.step(at(0.2), 0, -1, {}).submit == 0);  // sbatch has not answered: nothing more
  p.submitted(at(0.5), {{"job0", "job1", "job2", "job3"}, ""});
  PoolActions a = p.step(at(1), 0, -1, {});
  CHECK(a.submit == 0);  // pending jobs count: no oversubmission
  CHECK(a.poll);
  p.polled(at(1.1), poll_of({{"job0", State::running, "RUNNING", ""},
                             {"job1", State::running, "RUNNING", ""},
                             {"job2", State::pending, "PENDING", "Priority"},
                             {"job3", State::pending, "PENDING", "Priority"}}));
  // Two run (with workers), two still pend; scale(1): the pending go first, then one worker.
  p.scale(1);
  std::vector<PoolWorker> workers = {{1, "job0", true, {}, false}, {2, "job1", true, {}, false}};
  a = p.step(at(2), 0, -1, workers);
  CHECK(a.retire.size() == 1);  // one running worker retires gracefully (not scancelled yet)
  CHECK(a.cancel.empty());      // jobs to stop gather for cancel_delay, then go in one scancel
  workers[a.retire.front() - 1].leaving = true;
  a = p.step(at(3.1), 0, -1, workers);
  CHECK(a.cancel == std::vector<std::string>{"job2", "job3"});
  CHECK(a.submit == 0);
  CHECK(a.retire.empty());
}

TEST_CASE("Pool.Replaces.EndedAndLeavingJobs") {
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  s.step(1.0);  // poll: both run
  s.set("job0", State::ended, "CANCELLED", "by an admin");  // e.g. scancel by an admin, NODE_FAIL
  const std::vector<PoolWorker> both = {{1, "job0", false, {}, false}, {2, "job1", false, {}, false}};
  s.step(2.0, 0, -1, both);  // poll: job0 ended
  REQUIRE(s.ended.size() == 1);
  CHECK(s.ended[0].first == "job0");
  s.step(2.2, 0, -1, {{2, "job1", false, {}, false}});
  CHECK(s.submissions.size() == 2);
  CHECK(s.submissions[1].second == 1);
  // A worker near its walltime no longer counts: its successor is queued ahead of time.
  s.run_all();
  s.step(3.3, 0, -1, {{2, "job1", false, {}, true}, {3, "job2", false, {}, false}});
  CHECK(s.submissions.size() == 3);
  CHECK(s.submissions[2].second == 1);
}

TEST_CASE("Pool.Requeue.LostWorkerOfAnEarlierIncarnationKeepsTheJob") {
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  s.step(1.0);  // poll: both run
  const std::vector<PoolWorker> both = {{1, "job0", true, at(1), false}, {2, "job1", true, at(1), false}};
  s.step(2.0, 0, -1, both);
  // Slurm requeues job0 (its node failed) while its worker is still registered, silent.
  s.set("job0", State::pending, "PENDING", "BeginTime");
  s.step(3.0, 0, -1, both);  // poll sees it pending again
  s.step(4.0, 0, -1, both);
  CHECK(s.submissions.size() == 1);  // the requeued job is still capacity
  // It runs again elsewhere, and only then is the old worker declared lost: the job stays.
  s.set("job0", State::running, "RUNNING");
  s.step(5.0, 0, -1, both);
  s.pool.worker_left(at(5.5), "job0");
  s.step(7.0, 0, -1, {{2, "job1", true, at(1), false}});
  CHECK(s.cancels.empty());
  s.step(8.0, 0, -1, {{2, "job1", true, at(1), false}, {3, "job0", true, at(8), false}});
  CHECK(s.submissions.size() == 1);
  // The new incarnation's own worker dying is a loss like any other: its job goes.
  s.pool.worker_left(at(9.0), "job0");
  // A lost worker of a job never requeued: the job is cancelled, as before.
  s.pool.worker_left(at(9.1), "job1");
  s.step(11.0, 0, -1, {});
  REQUIRE(s.cancels.size() == 1);
  CHECK(s.cancels[0] == std::vector<std::string>{"job0", "job1"});
}

TEST_CASE("Pool.Failures.PauseInsteadOfStorm") {
  Sim s;
  s.refuse = "sbatch: error: invalid partition specified: nope";
  s.pool.scale(3);
  s.step(0);
  CHECK(s.submissions.size() == 1);
  const auto st = s.pool.status(0, at(0));
  CHECK(st.last_error.find("nope") != std::string::npos);
  CHECK(st.failed_submissions == 1);
  s.step(0.2);  // within the pause: no new sbatch
  CHECK(s.submissions.size() == 1);
  s.step(1.2);
  s.step(2.4);  // the third failure in a row pauses with a reason
  CHECK(s.submissions.size() == 3);
  CHECK(s.pool.status(0, at(2.4)).paused.find("3 submissions failed") != std::string::npos);
  for (int i = 0; i < 50; ++i) s.step(2.4 + 0.01 * i);
  CHECK(s.submissions.size() == 3);
  // A new scale() from the user tries again at once.
  s.pool.scale(3);
  s.step(2.95);
  CHECK(s.submissions.size() == 4);
}

TEST_CASE("Pool.Adapt.FollowsBacklogWithinBounds") {
  Sim s;
  s.pool.adapt(1, 5, std::chrono::seconds(60));
  s.step(0);
  REQUIRE(s.submissions.size() == 1);
  CHECK(s.submissions[0].second == 1);  // the minimum, even with no work
  s.step(0.2, 100);                     // durations unknown: one per task, capped
  REQUIRE(s.submissions.size() == 2);
  CHECK(s.submissions[1].second == 4);
  CHECK(s.pool.desired() == 5);
  // Short tasks: 100 tasks of 1 ms need one worker, not five.
  Sim quick;
  quick.pool.adapt(0, 5, std::chrono::seconds(60));
  quick.step(0, 100, 1000.0);
  REQUIRE(quick.submissions.size() == 1);
  CHECK(quick.submissions[0].second == 1);
  // Busy workers are never retired for having too little backlog; idle ones after the timeout.
  quick.run_all();
  quick.step(1.0, 100, 1000.0);
  const auto long_ago = at(-120);
  CHECK(quick.step(2, 0, 1000.0, {{7, "job0", false, long_ago, false}}).retire.empty());
  CHECK(quick.step(2.2, 0, 1000.0, {{7, "job0", true, long_ago, false}}).retire == std::vector<std::uint32_t>{7});
}

TEST_CASE("Pool.Polls.OneAtATimeAndAControllerThatDoesNotAnswer") {
  PoolState p(policy());
  p.scale(1);
  CHECK(p.step(at(0), 0, -1, {}).submit == 1);
  p.submitted(at(0.1), {{"job0"}, ""});
  CHECK(p.step(at(1), 0, -1, {}).poll);
  // squeue hangs: the polls that come due meanwhile are skipped, not queued.
  for (double t = 1.2; t < 30; t += 0.2) CHECK_FALSE(p.step(at(t), 0, -1, {}).poll);
  // It times out: nothing is concluded about the job, the status says why, the next poll waits.
  const std::string timeout = "squeue failed: slurm_load_jobs error: Socket timed out on send/recv operation";
  CHECK(p.polled(at(30), poll_of({{"job0", State::pending, "PENDING", "Priority"}}, timeout)).empty());
  CHECK(p.jobs().count("job0") == 1);
  auto st = p.status(1, at(30));
  CHECK(st.batch_error.find("Socket timed out") != std::string::npos);
  CHECK(st.batch_error.find("1 poll(s) in a row") != std::string::npos);
  CHECK(st.last_answer_s < 0);  // it never answered
  CHECK_FALSE(p.step(at(31), 0, -1, {}).poll);  // 2 s after the first failure
  CHECK(p.step(at(32.1), 0, -1, {}).poll);
  CHECK(p.polled(at(32.2), poll_of({{"job0", State::pending, "PENDING", ""}}, timeout)).empty());
  CHECK_FALSE(p.step(at(36.0), 0, -1, {}).poll);  // 4 s after the second
  CHECK(p.step(at(36.3), 0, -1, {}).poll);
  // It answers again: the error goes, the job's state comes.
  p.polled(at(36.5), poll_of({{"job0", State::running, "RUNNING", ""}}));
  st = p.status(1, at(37));
  CHECK(st.batch_error.empty());
  CHECK(st.running == 1);
  CHECK(st.last_answer_s == doctest::Approx(0.5));
  // A poll that failed never ended a job, and never made the pool submit another.
  CHECK(p.step(at(37), 0, -1, {{1, "job0", true, at(37), false}}).submit == 0);
}

TEST_CASE("Pool.Cancels.AWaveOfLostWorkersIsOneScancel") {
  Sim s;
  s.pool.scale(6);
  s.step(0);
  s.run_all();
  s.step(1.0);  // all six run
  std::vector<PoolWorker> workers;
  for (std::uint32_t i = 0; i < 6; ++i) workers.push_back({i + 1, "job" + std::to_string(i), true, at(0), false});
  // Four workers are lost within 0.8 s (they are gone from the scheduler's view).
  s.pool.worker_left(at(10.0), "job0");
  s.pool.worker_left(at(10.3), "job1");
  workers.erase(workers.begin(), workers.begin() + 2);
  PoolActions a = s.pool.step(at(10.5), 0, -1, workers);
  CHECK(a.cancel.empty());  // still gathering
  CHECK(a.submit == 2);     // their replacements go at once
  s.pool.submitted(at(10.55), {{"job6", "job7"}, ""});
  s.pool.worker_left(at(10.6), "job2");
  s.pool.worker_left(at(10.8), "job3");
  workers.erase(workers.begin(), workers.begin() + 2);
  a = s.pool.step(at(11.05), 0, -1, workers);
  CHECK(a.cancel == std::vector<std::string>{"job0", "job1", "job2", "job3"});  // one scancel
  CHECK(a.submit == 2);
  // While that scancel runs, the next lost worker waits for it: never two at once.
  s.pool.submitted(at(11.1), {{"job8", "job9"}, ""});
  s.pool.worker_left(at(11.1), "job4");
  CHECK(s.pool.step(at(12.5), 0, -1, {workers[1]}).cancel.empty());
  // scancel fails (controller down): the jobs are tried again after a pause, with the next.
  s.pool.cancelled(at(13), a.cancel, "scancel failed: Socket timed out on send/recv operation");
  CHECK(s.pool.step(at(13.5), 0, -1, {workers[1]}).cancel.empty());
  a = s.pool.step(at(15.1), 0, -1, {workers[1]});
  CHECK(a.cancel == std::vector<std::string>{"job0", "job1", "job2", "job3", "job4"});
}

TEST_CASE("Pool.CrashLoop.BacksOffThenPausesWithTheOutputAndScaleResumes") {
  // A prologue that exits 3: every job ends FAILED before its worker connects.
  Sim s;
  s.pool.scale(2);
  for (int i = 0; i <= 1500; ++i) {  // 300 s, a step every 200 ms
    const double t = 0.2 * i;
    s.step(t);
    for (auto& [id, j] : s.jobs) {
      if (j.state == State::pending) j = {id, State::ended, "FAILED", "exit code 3:0"};
    }
    for (const auto& id : s.reads) {
      s.pool.output_read(id, {"/logs/" + id + ".out"}, {"prologue: module gcc/99 not found"});
    }
    s.reads.clear();
  }
  // 2 jobs, then one at a time after pauses of 5, 10, 20 s; the fifth crash pauses.
  std::size_t jobs = 0;
  for (const auto& [t, n] : s.submissions) jobs += n;
  CHECK(jobs == 5);
  REQUIRE(s.submissions.size() == 4);
  CHECK(s.submissions[0].second == 2);
  for (std::size_t i = 1; i < s.submissions.size(); ++i) CHECK(s.submissions[i].second == 1);
  std::vector<double> gaps;
  for (std::size_t i = 1; i < s.submissions.size(); ++i) gaps.push_back(s.submissions[i].first - s.submissions[i - 1].first);
  for (std::size_t i = 1; i < gaps.size(); ++i) CHECK(gaps[i] >= 1.9 * gaps[i - 1]);
  CHECK(gaps.front() >= 5);
  CHECK(s.pool.crash_paused());
  const auto st = s.pool.status(0, at(300));
  CHECK(st.crashes == 5);
  CHECK(st.paused.find("5 jobs in a row ended before their worker connected") != std::string::npos);
  CHECK(st.paused.find("scale() or adapt() resumes") != std::string::npos);
  CHECK(st.paused.find("prologue: module gcc/99 not found") != std::string::npos);
  CHECK(st.paused.find("FAILED (exit code 3:0)") != std::string::npos);
  // The user scales again: the pool tries at once.
  s.pool.scale(2);
  s.step(300.2);
  REQUIRE(s.submissions.size() == 5);
  CHECK(s.submissions.back().second == 2);
  CHECK(s.pool.status(0, at(300.2)).paused.empty());
}

TEST_CASE("Pool.CrashLoop.AWorkerThatStaysEndsIt") {
  Sim s;
  s.pool.scale(2);
  s.step(0);
  for (auto& [id, j] : s.jobs) j = {id, State::ended, "FAILED", "exit code 1:0"};
  s.step(1.0);  // both crashed: back off, then one job at a time
  CHECK(s.pool.crashes() == 2);
  s.step(3.0);
  CHECK(s.submissions.size() == 1);
  s.step(6.1);  // 5 s after the crashes: one probe
  REQUIRE(s.submissions.size() == 2);
  CHECK(s.submissions[1].second == 1);
  s.run_all();
  const std::vector<PoolWorker> probe = {{1, "job2", false, at(7), false}};
  s.step(7.2, 0, -1, probe);  // its worker connected
  s.step(10.0, 0, -1, probe);
  CHECK(s.submissions.size() == 2);  // not before the probe proved itself
  CHECK(s.pool.crashes() == 2);
  s.step(17.3, 0, -1, probe);  // connected for 10 s: the jobs start fine, the rest goes
  CHECK(s.pool.crashes() == 0);
  REQUIRE(s.submissions.size() == 3);
  CHECK(s.submissions[2].second == 1);
}

TEST_CASE("Pool.CrashLoop.AWorkerKilledByItsTaskIsNoCrash") {
  // A poison task kills the worker that runs it a second after it connected: that is the
  // task's business (allowed failures), not a broken job; a worker that dies as soon as it
  // connects, before it had anything to do, is a crash.
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  const std::vector<PoolWorker> both = {{1, "job0", true, at(1), false}, {2, "job1", true, at(1), false}};
  s.step(1.0, 0, -1, both);  // connected, idle
  s.set("job0", State::ended, "FAILED", "exit code 0:6");
  s.set("job1", State::ended, "FAILED", "exit code 0:6");
  s.step(2.0, 0, -1, both);                  // poll: both ended 1 s after connecting
  s.pool.worker_left(at(2.1), "job0", true);  // job0's worker had a task when it died
  s.pool.worker_left(at(2.1), "job1", false);
  s.step(2.2);
  CHECK(s.pool.crashes() == 1);  // job1 only
  CHECK(s.pool.failed_jobs().size() == 2);  // both failures are shown
}

TEST_CASE("Pool.Stalled.SuspendedAndHeldJobsStopCountingAfterATimeout") {
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.set("job0", State::pending, "SUSPENDED", "");
  s.set("job1", State::pending, "PENDING", "JobHeldUser");
  s.step(1.0);  // poll: one suspended, one held
  CHECK(s.pool.job_suspended("job0"));
  CHECK_FALSE(s.pool.job_suspended("job1"));
  CHECK(s.pool.status(0, at(1)).stalled == 2);
  s.step(50);
  CHECK(s.submissions.size() == 1);  // for a while they still count
  s.step(61.2);
  REQUIRE(s.submissions.size() == 2);  // then two replacements
  CHECK(s.submissions[1].second == 2);
  // The scheduler let job0's silent worker go: a suspended job holds its node for nothing.
  Sim t;
  t.pool.scale(1);
  t.step(0);
  t.set("job0", State::pending, "SUSPENDED", "");
  t.step(1.0);
  t.pool.worker_left(at(11), "job0");
  CHECK(t.step(12.1).cancel == std::vector<std::string>{"job0"});
  // The same when the pool saw it running before it was suspended: running, then suspended,
  // is not a requeue (whose next incarnation a lost worker must leave alone).
  Sim u;
  u.pool.scale(1);
  u.step(0);
  u.run_all();
  u.step(1.0);  // poll: running
  u.set("job0", State::pending, "SUSPENDED", "");
  u.step(3.0);  // poll: suspended
  CHECK(u.pool.job_suspended("job0"));
  u.pool.worker_left(at(13), "job0");
  CHECK(u.step(14.1).cancel == std::vector<std::string>{"job0"});
  // Released and resumed: they count again, and the pool is two over its target.
  s.set("job0", State::running, "RUNNING");
  s.set("job1", State::pending, "PENDING", "Priority");
  s.step(62.5);
  CHECK_FALSE(s.pool.job_suspended("job0"));
  CHECK(s.pool.status(0, at(62.5)).stalled == 0);
  s.step(62.7);
  s.step(64.0);
  REQUIRE(s.cancels.size() == 1);
  CHECK(s.cancels[0].size() == 2);  // pending ones go first
}

TEST_CASE("CommandRunner.WorkOffTheThreadAnswersOnDrain") {
  CommandRunner runner(2);
  const auto caller = std::this_thread::get_id();
  std::vector<std::thread::id> answers;
  runner.post([&answers]() -> CommandRunner::Continuation {
    const auto worked_on = std::this_thread::get_id();
    return [worked_on, &answers] { answers.push_back(worked_on); };
  });
  pollfd pfd{runner.wake_fd(), POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 5000) == 1);  // the loop would wake here
  CHECK(answers.empty());  // nothing runs on the caller's thread before drain()
  CHECK(runner.drain() == 1);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0] != caller);  // the work ran on a thread of the runner
  CHECK(::poll(&pfd, 1, 0) == 0);  // drained
  // A command with its own timeout.
  const auto r = CommandRunner::run({"sleep", "5"}, 0.3);
  CHECK(r.timed_out);
  CHECK(r.wall_time_s < 3);
}

TEST_CASE("Pool.Shell.AnswersComeLaterAndTheScaleReplyWaitsForThem") {
  CommandRunner runner(1);
  FakeJobQueue::State s;
  s.hold = true;  // the batch system answers only when the test says so
  Pool pool(policy(), std::make_unique<FakeJobQueue>(s));
  pool.attach(runner);
  // Nothing to submit: settled at once.
  std::string settled = "unset";
  pool.when_settled([&](const std::string& e) { settled = e; });
  CHECK(settled.empty());
  pool.scale(3);
  const auto now = Clock::now();
  CHECK(pool.step(now, 0, -1, {}).empty());
  CHECK(s.submissions == std::vector<std::size_t>{3});
  settled = "unset";
  pool.when_settled([&](const std::string& e) { settled = e; });
  runner.drain();
  CHECK(settled == "unset");  // sbatch has not answered: the reply waits (the loop does not)
  (void)pool.step(now + 300ms, 0, -1, {});
  CHECK(s.submissions.size() == 1);
  s.release();
  CHECK(runner.wait_idle(5s));
  CHECK(settled.empty());
  CHECK(pool.jobs().size() == 3);
  // A refusal reaches whoever waits for it.
  s.refuse = "sbatch: error: Invalid account or account/partition combination specified";
  pool.scale(5);
  (void)pool.step(now + 600ms, 0, -1, {});
  REQUIRE(s.submissions.size() == 2);
  CHECK(s.submissions[1] == 2);
  settled = "unset";
  pool.when_settled([&](const std::string& e) { settled = e; });
  s.release();
  CHECK(runner.wait_idle(5s));
  CHECK(settled.find("Invalid account") != std::string::npos);
  // One poll at a time: the next comes only after the last answered; one that comes due while
  // one is under way is skipped.
  CHECK(s.polls == 1);  // started with the refused submission, answered with it
  (void)pool.step(now + 1500ms, 0, -1, {});
  CHECK(s.polls == 1);  // not due yet
  (void)pool.step(now + 3000ms, 0, -1, {});
  (void)pool.step(now + 6000ms, 0, -1, {});
  CHECK(s.polls == 2);
  s.release();
  CHECK(runner.wait_idle(5s));
  (void)pool.step(now + 7000ms, 0, -1, {});
  CHECK(s.polls == 3);
}

TEST_CASE("Pool.WorkersPerJob.ScaleAndAdaptCountWholeJobs") {
  PoolPolicy p = policy();
  p.workers_per_job = 2;
  p.cores_per_job = 8;
  p.memory_per_job = 16LL << 30;
  std::string refused;
  auto jobs = [&](std::int64_t workers, std::int64_t j, std::int64_t cores, std::int64_t memory) {
    herd::protocol::ScalePoolRequest req;
    req.target = static_cast<std::uint32_t>(workers);
    req.jobs = j;
    req.cores = cores;
    req.memory = memory;
    return herd::scheduler::scale_jobs(p, req, refused);
  };
  CHECK(jobs(5, -1, -1, -1) == 3u);               // 5 workers: three jobs of two
  CHECK(jobs(4, -1, -1, -1) == 2u);
  CHECK(jobs(0, 3, -1, -1) == 3u);                // jobs as asked
  CHECK(jobs(0, -1, 20, -1) == 3u);               // 20 cores: three jobs of 8
  CHECK(jobs(0, -1, -1, 40LL << 30) == 3u);       // 40 GiB: three jobs of 16
  CHECK(jobs(0, 1, 17, 1) == 3u);                 // several: the most jobs wins
  CHECK(refused.empty());
  p.memory_per_job = 0;
  CHECK_FALSE(jobs(0, -1, -1, 1LL << 30).has_value());
  CHECK(refused.find("asks for no memory") != std::string::npos);

  // Adapt: the bounds and the backlog count workers, the submissions jobs.
  p.memory_per_job = 16LL << 30;
  Sim s(p);
  s.pool.adapt(0, 6, std::chrono::seconds(60));
  s.step(0, 5);  // five tasks of one slot: five workers, three jobs
  REQUIRE(s.submissions.size() == 1);
  CHECK(s.submissions[0].second == 3);
  CHECK(s.pool.status(0, at(0)).target == 6);  // in workers
  CHECK(s.pool.status(0, at(0)).workers_per_job == 2);
}

TEST_CASE("Pool.WorkersPerJob.ShrinkRetiresWholeJobsAndAJobStaysForItsLastWorker") {
  PoolPolicy p = policy();
  p.workers_per_job = 2;
  Sim s(p);
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  s.step(1.0);
  const auto long_ago = at(-120);
  std::vector<PoolWorker> w = {{1, "job0", true, long_ago, false}, {2, "job0", true, long_ago, false},
                               {3, "job1", false, long_ago, false}, {4, "job1", true, long_ago, false}};
  // One job too many: both workers of one job retire (the idle job first), none of the other.
  s.pool.scale(1);
  auto a = s.step(2.0, 0, -1, w);
  CHECK(a.retire == std::vector<std::uint32_t>{1, 2});
  // The first of them leaves: its sibling still runs there, the job stays.
  w[0].leaving = w[1].leaving = true;
  s.pool.worker_left(at(2.1), "job0", false, /*siblings=*/true);
  a = s.step(4.0, 0, -1, {w[1], w[2], w[3]});
  CHECK(a.cancel.empty());
  // The last one leaves: the job goes.
  s.pool.worker_left(at(4.1), "job0", false, /*siblings=*/false);
  s.step(4.2, 0, -1, {w[2], w[3]});
  a = s.step(6.0, 0, -1, {w[2], w[3]});
  REQUIRE(s.cancels.size() == 1);
  CHECK(s.cancels[0] == std::vector<std::string>{"job0"});
}

TEST_CASE("Pool.Walltime.AJobWhoseWorkerLeftOnItsOwnIsNoCapacity") {
  // Workers retire before their walltime and leave on their own; Slurm lists their jobs as
  // RUNNING a while longer. Those jobs must not count, or the pool sees four jobs for two and
  // retires the replacements (losing every result the old workers handed them).
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  s.step(1.0);
  const std::vector<PoolWorker> old = {{1, "job0", true, at(1), false}, {2, "job1", true, at(1), false}};
  s.step(2.0, 0, -1, old);
  // Near their end: leaving, replacements are submitted.
  s.step(3.0, 0, -1, {{1, "job0", true, at(1), true}, {2, "job1", true, at(1), true}});
  REQUIRE(s.submissions.size() == 2);
  CHECK(s.submissions[1].second == 2);
  s.run_all();  // job0..job3 all RUNNING
  s.step(4.0, 0, -1, {{1, "job0", true, at(1), true}, {2, "job1", true, at(1), true}});
  // The old workers left on their own; their jobs are still RUNNING in Slurm.
  s.pool.worker_done(at(4.5), "job0");
  s.pool.worker_done(at(4.5), "job1");
  const std::vector<PoolWorker> fresh = {{3, "job2", true, at(4), false}, {4, "job3", true, at(4), false}};
  const PoolActions a = s.step(5.0, 0, -1, fresh);
  CHECK(a.retire.empty());  // the new workers stay
  CHECK(a.submit == 0);
  CHECK(s.submissions.size() == 2);
  // The old jobs end by themselves: nothing changes.
  s.set("job0", State::ended, "COMPLETED");
  s.set("job1", State::ended, "COMPLETED");
  CHECK(s.step(7.0, 0, -1, fresh).retire.empty());
  CHECK(s.cancels.empty());
}

TEST_CASE("Pool.LeftOnItsOwn.ReplacedOnceEndedNotWhenRequeued") {
  // A drain signal and `scontrol requeue` look the same to a worker: SIGTERM, it leaves on its
  // own. The pool waits for the batch system to say which it was: a job that ends is replaced,
  // a job that goes back to PENDING is not (its next incarnation brings a worker back).
  Sim s;
  s.pool.scale(2);
  s.step(0);
  s.run_all();
  const std::vector<PoolWorker> both = {{1, "job0", true, at(1), false}, {2, "job1", true, at(1), false}};
  s.step(1.0, 0, -1, both);
  REQUIRE(s.submissions.size() == 1);
  // job0 is requeued: its worker gets SIGTERM and retires on its own, then leaves; Slurm still
  // lists the job as COMPLETING (running).
  CHECK(s.step(1.5, 0, -1, {{1, "job0", true, at(1), true, true}, {2, "job1", true, at(1), false}}).submit == 0);
  s.pool.worker_done(at(2.0), "job0");
  const std::vector<PoolWorker> one = {{2, "job1", true, at(1), false}};
  CHECK(s.step(2.5, 0, -1, one).submit == 0);
  s.set("job0", State::pending, "PENDING", "BeginTime");
  CHECK(s.step(4.0, 0, -1, one).submit == 0);
  CHECK(s.step(20.0, 0, -1, one).submit == 0);  // long after: it is capacity again, no third job
  s.set("job0", State::running, "RUNNING");
  CHECK(s.step(21.0, 0, -1, {{2, "job1", true, at(1), false}, {3, "job0", true, at(21), false}}).submit == 0);
  // job1 gets the drain signal: its worker leaves, and the job ends by itself: replaced.
  s.pool.worker_done(at(22.0), "job1");
  const std::vector<PoolWorker> other = {{3, "job0", true, at(21), false}};
  CHECK(s.step(22.5, 0, -1, other).submit == 0);
  s.set("job1", State::ended, "COMPLETED");
  s.step(24.0, 0, -1, other);  // the poll that sees it end
  s.step(25.0, 0, -1, other);
  CHECK(s.submissions.size() == 2);
  CHECK(s.submissions.back().second == 1);
  CHECK(s.cancels.empty());
  // And a job that Slurm lists as running long after its worker left is replaced after a grace.
  s.run_all();
  const std::vector<PoolWorker> two = {{3, "job0", true, at(21), false}, {4, "job2", true, at(26), false}};
  s.step(26.0, 0, -1, two);
  s.pool.worker_done(at(27.0), "job2");
  const std::vector<PoolWorker> alone = {{3, "job0", true, at(21), false}};
  CHECK(s.step(40.0, 0, -1, alone).submit == 0);
  CHECK(s.step(58.0, 0, -1, alone).submit == 1);
}

TEST_CASE("Pool.Adapt.IntervalTargetDurationAndWaitCount") {
  // target_duration: 100 tasks of 1 s on one-slot workers, to be cleared in 20 s: 5 workers.
  Sim s;
  s.pool.adapt(0, 50, std::chrono::seconds(1));
  s.pool.adapt_pace(std::chrono::milliseconds(2000), std::chrono::milliseconds(20000), 3);
  s.step(0, 100, 1e6);
  REQUIRE(s.submissions.size() == 1);
  CHECK(s.submissions[0].second == 5);
  // interval: the backlog doubles, but no new decision before 2 s have passed.
  s.run_all();
  CHECK(s.step(1.0, 200, 1e6).submit == 0);
  CHECK(s.pool.desired() == 5);
  CHECK(s.step(2.0, 200, 1e6).submit == 5);
  s.run_all();
  // wait_count: the backlog is gone and every worker idle long since; the pool shrinks only at
  // the third decision in a row that asks for it (t = 4, 6, 8), not at the first two.
  std::vector<PoolWorker> idle;
  for (std::uint32_t i = 0; i < 10; ++i) idle.push_back({i + 1, "job" + std::to_string(i), true, at(-100), false});
  CHECK(s.step(4.0, 0, 1e6, idle).retire.empty());
  CHECK(s.step(5.0, 0, 1e6, idle).retire.empty());
  CHECK(s.step(6.0, 0, 1e6, idle).retire.empty());
  CHECK(s.step(8.0, 0, 1e6, idle).retire.size() == 10);
  // A decision that wants them all again starts the count over.
  Sim t;
  t.pool.adapt(0, 50, std::chrono::seconds(1));
  t.pool.adapt_pace(std::chrono::milliseconds(1000), std::chrono::milliseconds(20000), 2);
  t.step(0, 40, 1e6);
  t.run_all();
  const std::vector<PoolWorker> two = {{1, "job0", true, at(-100), false}, {2, "job1", true, at(-100), false}};
  CHECK(t.step(1.0, 0, 1e6, two).retire.empty());   // one vote
  CHECK(t.step(2.0, 40, 1e6, two).retire.empty());  // work again: votes start over
  CHECK(t.step(3.0, 0, 1e6, two).retire.empty());   // one vote
  CHECK(t.step(4.0, 0, 1e6, two).retire.size() == 2);
}

TEST_CASE("Pool.StopJob.RestartCancelsJobsNoPollSawRunAndCountsNoCrash") {
  // Client::restart() right after start: the pool submitted two jobs, their workers connected,
  // but no poll has said the jobs run. The restart stops them: both cancelled in one call,
  // replaced at once, and their end is no crash (no backoff).
  Sim s;
  s.pool.scale(2);
  s.step(0);
  REQUIRE(s.submissions.size() == 1);
  s.run_all();  // the batch system runs them; the pool has not polled yet
  s.pool.stop_job(at(0.1), "job0");
  s.pool.stop_job(at(0.1), "job1");
  s.pool.stop_job(at(0.1), "job1");  // twice: once is enough
  s.pool.stop_job(at(0.1), "nope");  // not its job: ignored
  s.step(0.2);                       // replacements submitted at once (the old jobs are no capacity)
  REQUIRE(s.submissions.size() == 2);
  CHECK(s.submissions[1].second == 2);
  s.step(1.2);  // after the cancel delay: one call for both
  REQUIRE(s.cancels.size() == 1);
  CHECK(s.cancels[0] == std::vector<std::string>{"job0", "job1"});
  s.set("job2", State::running, "RUNNING");
  s.set("job3", State::running, "RUNNING");
  s.step(2.5);  // poll: the old jobs ended (cancelled, as asked)
  s.step(3.0);
  REQUIRE(s.ended.size() == 2);
  CHECK(s.ended[0].first == "job0");
  CHECK(s.ended[1].first == "job1");
  const auto st = s.pool.status(0, at(3.0));
  CHECK(st.crashes == 0);
  CHECK(st.paused.empty());
  CHECK(st.last_failure.empty());
}

TEST_CASE("Pool.ScaleDown.KeepsNoWorkerForDataSafeElsewhereAndOneForDataOnlyItHolds") {
  // adapt(0, 4, idle 5 s): four workers, idle for long. Holding nothing that is not safe
  // elsewhere (the client has their values), all four go. One holding results only it has
  // stays for them while no other worker stays, and is reported as kept; another worker that
  // stays lets it go (its results move there).
  const auto long_ago = at(-120);
  auto idle4 = [&](bool leaving_others = false) {
    std::vector<PoolWorker> w;
    for (std::uint32_t i = 0; i < 4; ++i) w.push_back({i, "job" + std::to_string(i), true, long_ago, leaving_others && i != 1});
    return w;
  };
  auto started = [](Sim& s) {
    s.pool.adapt(0, 4, std::chrono::seconds(5));
    s.step(0, 4);
    REQUIRE(s.submissions.size() == 1);
    REQUIRE(s.submissions[0].second == 4);
    s.run_all();
    s.step(1.0, 4);
  };
  {
    Sim s;
    started(s);
    const auto a = s.step(10, 0, 1e6, idle4(), [](std::uint32_t) { return 0u; });
    CHECK(a.retire.size() == 4);
    CHECK(s.pool.kept().empty());
  }
  {
    Sim s;
    started(s);
    const auto holds = [](std::uint32_t id) { return id == 1 ? 3u : 0u; };
    auto a = s.step(10, 0, 1e6, idle4(), holds);
    std::sort(a.retire.begin(), a.retire.end());
    CHECK(a.retire == std::vector<std::uint32_t>{0, 2, 3});
    CHECK(s.pool.kept() == std::vector<std::uint32_t>{1});
    // The others on their way out: worker 1 still has no one to hand its results to.
    a = s.step(10.2, 0, 1e6, idle4(/*leaving_others=*/true), holds);
    CHECK(a.retire.empty());
    CHECK(s.pool.kept() == std::vector<std::uint32_t>{1});
    // Its results are safe elsewhere now (fetched or released): it goes.
    a = s.step(10.4, 0, 1e6, idle4(true), [](std::uint32_t) { return 0u; });
    CHECK(a.retire == std::vector<std::uint32_t>{1});
    CHECK(s.pool.kept().empty());
  }
  {
    // A minimum of 1: workers holding nothing go first, the one with data stays as the one.
    Sim s;
    started(s);
    s.pool.adapt(1, 4, std::chrono::seconds(5));
    auto a = s.step(10, 0, 1e6, idle4(), [](std::uint32_t id) { return id == 2 ? 1u : 0u; });
    std::sort(a.retire.begin(), a.retire.end());
    CHECK(a.retire == std::vector<std::uint32_t>{0, 1, 3});
    CHECK(s.pool.kept().empty());
  }
  {
    // A fixed size of 1 from 4, every worker holding data: three go (each hands its results to
    // one that stays), the last stays as the pool's one.
    Sim s;
    started(s);
    s.pool.scale(1);
    const auto a = s.step(10, 0, 1e6, idle4(), [](std::uint32_t) { return 2u; });
    CHECK(a.retire.size() == 3);
    CHECK(s.pool.kept().empty());
  }
}

TEST_CASE("Pool.Pause.NoSubmissionUntilResumeAndTheStatusSaysHowToResume") {
  Sim s;
  s.pool.pause();
  s.pool.scale(3);  // a size, not a resume
  s.step(0);
  CHECK(s.submissions.empty());
  CHECK(s.pool.desired() == 3);
  const auto st = s.pool.status(0, at(0));
  CHECK(st.user_paused);
  CHECK(st.paused.find("herd pool resume cpu") != std::string::npos);
  s.pool.resume();
  s.step(1);
  REQUIRE(s.submissions.size() == 1);
  CHECK(s.submissions[0].second == 3);
  CHECK(!s.pool.status(0, at(1)).user_paused);
  CHECK(s.pool.status(0, at(1)).paused.empty());
  // Paused, it still shrinks.
  s.run_all();
  s.step(2);
  s.pool.pause();
  s.pool.scale(1);
  const auto a = s.step(3, 0, -1, {{0, "job0", true, at(0), false}, {1, "job1", true, at(0), false}, {2, "job2", true, at(0), false}});
  CHECK(a.retire.size() == 2);
}
