// A pool of workers, in two parts:
//
// PoolState, the policy: what to do, from what the batch system answered and the time it is
// given (`now`); no IO, no clock of its own, no command. A fixed target (scale) or one that
// follows the scheduler's backlog (adapt), replacement of jobs that ended while still wanted
// and of workers near their walltime, one submission / one poll / one scancel at a time, every
// job to stop in one scancel, and the batch system's bad days: a pause after repeated
// submission failures, a crash loop (jobs that die before their worker connects) that backs
// off and then pauses until the user scales again, jobs suspended or held that stop counting
// as capacity, and polls that fail or time out, retried with a growing pause and shown, never
// taken for jobs that ended.
//
// Pool, the shell around it: carries out what PoolState decides through the JobQueue
// (asynchronous: the commands run on the CommandRunner's threads) and feeds the answers back.
// The scheduler holds Pools; nothing it calls here waits for the batch system.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobqueue/command_runner.hpp"
#include "jobqueue/job_queue.hpp"
#include "protocol/messages.hpp"

namespace herd::scheduler {

struct PoolPolicy {
  std::string name;
  std::uint32_t target = 0;         // scale(n)
  bool adaptive = false;            // adapt(minimum, maximum)
  std::uint32_t minimum = 0, maximum = 0;
  std::chrono::seconds idle_timeout{60};
  // adapt()'s pace, as Dask's Adaptive: a new size is worked out every `adapt_interval` (0 =
  // at every step, so a backlog is seen at once); the backlog is to be cleared in about
  // `target_duration` of work per slot; a shrink happens only once `wait_count` decisions in a
  // row asked for one (idle_timeout already keeps workers a while: 1 by default).
  std::chrono::milliseconds adapt_interval{0};
  std::chrono::milliseconds target_duration{10000};
  std::uint32_t wait_count = 1;
  std::uint32_t slots_per_worker = 1;
  std::uint32_t workers_per_job = 1;        // processes x nodes: `target` counts jobs, scale()
                                            //   and adapt() bounds count workers
  std::uint32_t cores_per_job = 1;          // for scale(cores=)
  long long memory_per_job = 0;             // bytes, for scale(memory=) (0 = not known)
  std::map<std::string, double> resources;  // what its workers offer
  std::uint32_t retire_before_s = 60;       // workers retire this long before their walltime
  std::uint32_t walltime_s = 0;             // jobs' time limit (0 = none)
  // The batch system's pace and bad days.
  std::chrono::milliseconds poll_interval{1000};  // between polls (one squeue each)
  std::chrono::seconds max_poll_backoff{60};      // longest pause between failing polls
  std::chrono::milliseconds cancel_delay{1000};   // jobs to stop gather this long: one scancel
  std::chrono::seconds crash_window{10};          // a worker that dies this soon after it
                                                  //   connected (or before) is a crash
  std::uint32_t crash_backoff_after = 2;          // crashes in a row before backing off
  std::chrono::seconds crash_backoff{5};          // first pause; doubles with each crash
  std::uint32_t crash_limit = 5;                  // crashes in a row that pause the pool until
                                                  //   the user scales or adapts again
  std::chrono::seconds stalled_timeout{60};       // suspended/stopped/held jobs stop counting
                                                  //   as capacity after this long
  /// How long before its end a worker stops counting as capacity, so that its replacement is
  /// queued while it still works: the retirement margin plus a lead of at most a quarter of the
  /// walltime (a short walltime must not make every new worker look expiring at once).
  std::uint32_t replace_lead_s() const {
    return retire_before_s + std::min(retire_before_s, walltime_s / 4);
  }
};

/// The jobs a fixed-size scale request asks for: `target` workers (whole jobs of
/// workers_per_job), or `jobs`, `cores` or `memory` when given (the most jobs any of them
/// needs). nullopt with `refused` saying why when the pool cannot tell (memory of a pool that
/// asks for none).
std::optional<std::uint32_t> scale_jobs(const PoolPolicy& policy, const protocol::ScalePoolRequest& req,
                                        std::string& refused);

/// The scheduler's view of one worker of the pool, each step.
struct PoolWorker {
  std::uint32_t id = 0;
  std::string job_id;
  bool idle = false;                          // nothing processing
  std::chrono::steady_clock::time_point idle_since;
  bool leaving = false;                       // retiring or about to expire: not capacity
  bool ending = false;                        // retiring on its own, not near its walltime: a
                                              // drain signal or a requeue; Slurm will say which
};

/// What one step decided. Each is started without waiting; answers come back as events.
struct PoolActions {
  std::size_t submit = 0;                     // start a submission of this many jobs
  bool poll = false;                          // ask the batch system for the jobs' states
  std::vector<std::string> cancel;            // stop these jobs, in one command
  std::vector<std::uint32_t> retire;          // retire these workers gracefully
  std::vector<std::uint32_t> kept;            // would be retired, but hold results only they have
                                              //   and no worker of the pool stays to take them
  std::vector<std::string> read_output;       // failed jobs: read the end of their output
};

/// A job that ended without being asked to (failed start, crash, time limit, ...), with
/// the end of its output file(s): in `herd status` and the pool's last_failure.
struct FailedJob {
  jobqueue::JobInfo info;
  bool had_worker = false;          // its worker had connected
  std::vector<std::string> files;   // its output file(s)
  std::vector<std::string> tail;    // their last lines
  bool output_read = false;         // files and tail filled in (read off the loop)
};

class PoolState {
 public:
  using Clock = std::chrono::steady_clock;
  using Ended = std::vector<std::pair<std::string, std::string>>;  // (job id, how it ended)

  explicit PoolState(PoolPolicy policy) : policy_(std::move(policy)) {}

  const std::string& name() const { return policy_.name; }
  const PoolPolicy& policy() const { return policy_; }
  /// The user asks for a size (in jobs) or bounds (in workers): also resumes a paused pool.
  void scale(std::uint32_t n);
  void adapt(std::uint32_t minimum, std::uint32_t maximum, std::chrono::seconds idle_timeout);
  /// adapt()'s pace (interval < 0, target_duration or wait_count 0: keep the current value).
  void adapt_pace(std::chrono::milliseconds interval, std::chrono::milliseconds target_duration, std::uint32_t wait_count);

  /// The user pauses the pool (`herd pool pause`): no job is submitted until resume(); its
  /// workers stay, and it still shrinks. scale() and adapt() change its size, not the pause.
  void pause() { user_paused_ = true; }
  void resume() { user_paused_ = false; }
  bool user_paused() const { return user_paused_; }

  /// Results only worker `id` holds that would have to move if it left (0: none, or it holds
  /// nothing anyone needs that is not safe elsewhere). Asked only of workers step() would retire.
  using HoldsData = std::function<std::uint32_t(std::uint32_t id)>;

  /// One decision step. `backlog`: ready + processing tasks this pool's workers could run;
  /// `avg_task_us`: mean task time seen (< 0 unknown). A worker holding data (`holds_data`)
  /// is retired only when another worker of the pool stays to take its results; otherwise it
  /// is kept (PoolActions::kept), and goes once its results are safe elsewhere.
  PoolActions step(Clock::time_point now, std::size_t backlog, double avg_task_us,
                   const std::vector<PoolWorker>& workers, const HoldsData& holds_data = {});
  /// Workers the last step kept for their data.
  const std::vector<std::uint32_t>& kept() const { return kept_; }

  // The batch system's answers to what step() started.
  void submitted(Clock::time_point now, const jobqueue::SubmitResult& result);
  /// Returns the jobs that ended since the last poll.
  Ended polled(Clock::time_point now, const jobqueue::PollResult& result);
  void cancelled(Clock::time_point now, const std::vector<std::string>& ids, const std::string& error);
  void output_read(const std::string& job, std::vector<std::string> files, std::vector<std::string> tail);
  /// A worker of job `job_id` left: the job goes too (in the next scancel). `worked`: it had
  /// tasks or results (its death is then the tasks' business, not a crash loop's).
  /// `siblings`: other workers of the same job are still connected (the job stays for them).
  void worker_left(Clock::time_point now, const std::string& job_id, bool worked = false, bool siblings = false);
  /// The scheduler stopped this job's workers on purpose (Client::restart()): the job is
  /// cancelled whatever the last poll said of it (a poll may not have seen it run yet), and
  /// its end is no crash.
  void stop_job(Clock::time_point now, const std::string& job_id);
  /// The last worker of job `job_id` left on its own (walltime, drain signal, or a requeue,
  /// which signals the same way): the job is no capacity to retire workers against, and is not
  /// replaced either until the batch system says how it went on (ended: replaced; pending
  /// again: requeued, its next incarnation brings a worker), for at most ending_grace.
  void worker_done(Clock::time_point now, const std::string& job_id) {
    if (jobs_.count(job_id)) done_.emplace(job_id, now);
  }

  bool submitting() const { return submitting_; }
  bool polling() const { return polling_; }
  std::uint32_t desired() const { return desired_; }
  std::uint32_t crashes() const { return crashes_; }
  bool crash_paused() const { return crash_paused_; }
  /// Live jobs by id, with the batch system's state and pending reason (for `herd status`).
  const std::map<std::string, jobqueue::JobInfo>& jobs() const { return jobs_; }
  bool knows_job(const std::string& id) const;
  /// True when job `id` is SUSPENDED or STOPPED: its worker is frozen, not dead.
  bool job_suspended(const std::string& id) const;
  const std::deque<FailedJob>& failed_jobs() const { return failed_; }
  protocol::PoolStatus status(std::uint32_t connected_workers, Clock::time_point now) const;
  /// Forgets every job (after the queue cancelled them at shutdown).
  void clear_jobs();

 private:
  void job_ended(Clock::time_point now, const jobqueue::JobInfo& job, bool asked_to_stop, bool crash);  // pool_logs.cpp
  void submission_failed(Clock::time_point now, const std::string& error);
  void queue_cancel(Clock::time_point now, const std::string& id);
  bool may_submit(Clock::time_point now, std::size_t unproven) const;

  PoolPolicy policy_;
  bool user_paused_ = false;                       // herd pool pause
  std::vector<std::uint32_t> kept_;                // kept for data by the last step
  std::map<std::string, jobqueue::JobInfo> jobs_;  // live jobs
  std::set<std::string> cancelled_;                // asked to stop (or about to be); not capacity
  std::set<std::string> requeued_;                 // requeued since their worker connected
  std::map<std::string, Clock::time_point> done_;  // their workers left on their own (when)
  std::uint32_t desired_ = 0;
  // adapt(): the last size worked out, when the next is due, and shrinks asked for in a row.
  std::uint32_t adapt_desired_ = 0;
  Clock::time_point next_adapt_{};
  std::uint32_t shrink_votes_ = 0;
  // Submissions.
  bool submitting_ = false;
  int consecutive_failures_ = 0;
  Clock::time_point paused_until_{};
  std::string paused_reason_, last_error_;
  std::uint64_t submitted_ = 0, failed_submissions_ = 0;
  // Crash loop: jobs that end before their worker connects, or just after.
  std::map<std::string, Clock::time_point> connected_at_;  // live jobs whose worker connected
  std::set<std::string> worked_;                           // ... and was given work
  // Jobs that ended soon after their worker connected: a crash only if the worker never had a
  // task (a poison task kills a worker too; that is the tasks' business). Decided in the next
  // step, once the scheduler has said (worker_left) what the worker was doing.
  std::vector<std::pair<jobqueue::JobInfo, bool>> undecided_;  // (job, asked to stop)
  std::uint32_t crashes_ = 0;
  Clock::time_point crash_next_try_{};
  bool crash_paused_ = false;
  // Polls.
  bool polling_ = false;
  Clock::time_point next_poll_{};
  std::uint32_t poll_failures_ = 0;
  std::string batch_error_;
  Clock::time_point batch_error_since_{}, last_answer_{};
  std::map<std::string, Clock::time_point> stalled_since_;  // suspended, stopped or held jobs
  // Cancels: gathered, then one command.
  std::set<std::string> to_cancel_;
  Clock::time_point to_cancel_since_{}, next_cancel_{};
  bool cancelling_ = false;
  std::uint32_t cancel_failures_ = 0;
  // Job output (src/scheduler/pool_logs.cpp).
  std::deque<std::string> ended_;      // recently ended job ids (for `herd logs JOB`)
  std::deque<FailedJob> failed_;       // recent failures, newest last
  std::vector<std::string> to_read_;   // failures whose output is wanted
  std::string last_failure_;
};

class Pool {
 public:
  using Clock = PoolState::Clock;
  Pool(PoolPolicy policy, std::unique_ptr<jobqueue::JobQueue> queue);
  ~Pool();

  /// The threads the batch system's commands and job-output reads run on; before step().
  void attach(jobqueue::CommandRunner& runner);

  const std::string& name() const { return state_.name(); }
  const PoolPolicy& policy() const { return state_.policy(); }
  void scale(std::uint32_t n) { state_.scale(n); }
  void adapt(std::uint32_t minimum, std::uint32_t maximum, std::chrono::seconds idle_timeout) {
    state_.adapt(minimum, maximum, idle_timeout);
  }
  void adapt_pace(std::chrono::milliseconds interval, std::chrono::milliseconds target_duration, std::uint32_t wait_count) {
    state_.adapt_pace(interval, target_duration, wait_count);
  }

  /// One step: PoolState decides, and what it decided is started (submission, poll, one
  /// scancel for every job to stop, reads of failed jobs' output) without waiting for any of
  /// it. Returns the workers to retire gracefully.
  std::vector<std::uint32_t> step(Clock::time_point now, std::size_t backlog, double avg_task_us,
                                  const std::vector<PoolWorker>& workers, const PoolState::HoldsData& holds_data = {});
  void pause() { state_.pause(); }
  void resume() { state_.resume(); }
  /// Jobs that ended (id, how), from polls answered since the last call.
  PoolState::Ended take_ended();
  /// A worker of job `job_id` left: make sure the job is gone too (gathered into one scancel).
  void worker_left(const std::string& job_id, bool worked = false, bool siblings = false) {
    state_.worker_left(Clock::now(), job_id, worked, siblings);
  }
  void worker_done(const std::string& job_id) { state_.worker_done(Clock::now(), job_id); }
  /// Client::restart(): see PoolState::stop_job.
  void stop_job(const std::string& job_id) { state_.stop_job(Clock::now(), job_id); }
  /// `done(error)` once the submission under way is answered ("" = accepted), or at once when
  /// none is (the scale reply waits for sbatch without the loop waiting).
  void when_settled(std::function<void(const std::string& error)> done);
  bool job_suspended(const std::string& id) const { return state_.job_suspended(id); }
  /// Cancels every job and waits (bounded) until they are gone: shutdown only.
  void close();

  protocol::PoolStatus status(std::uint32_t connected_workers) const;
  std::uint32_t desired() const { return state_.desired(); }
  const std::map<std::string, jobqueue::JobInfo>& jobs() const { return state_.jobs(); }
  const std::deque<FailedJob>& failed_jobs() const { return state_.failed_jobs(); }
  const PoolState& state() const { return state_; }
  /// `herd logs JOB`: reads the output file(s) of a live or recently ended job of this pool
  /// off the loop; `done` gets one source per file. False (and no call) when the pool does
  /// not know the job.
  bool read_job_output(const std::string& id, std::size_t lines,
                       std::function<void(std::vector<protocol::LogSource>)> done);

 private:
  jobqueue::CommandRunner& runner();

  PoolState state_;
  std::shared_ptr<jobqueue::JobQueue> queue_;  // shared with work still running on the runner
  jobqueue::CommandRunner* runner_ = nullptr;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // answers that come after the
                                                                //   pool is gone are dropped
  PoolState::Ended ended_;
  std::vector<std::function<void(const std::string&)>> settle_waiters_;
};

}  // namespace herd::scheduler
