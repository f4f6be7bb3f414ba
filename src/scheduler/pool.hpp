// A pool of workers and the policy that sizes it: a fixed target (scale) or a target that
// follows the scheduler's backlog (adapt), replacement of jobs that ended while still wanted,
// replacement ahead of walltime, and a pause after repeated submission failures instead of a
// storm of sbatch calls. The JobQueue underneath only starts, watches and stops jobs.
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "jobqueue/job_queue.hpp"
#include "protocol/messages.hpp"

namespace herd::scheduler {

struct PoolPolicy {
  std::string name;
  std::uint32_t target = 0;         // scale(n)
  bool adaptive = false;            // adapt(minimum, maximum)
  std::uint32_t minimum = 0, maximum = 0;
  std::chrono::seconds idle_timeout{60};
  std::uint32_t slots_per_worker = 1;
  std::map<std::string, double> resources;  // what its workers offer
  std::uint32_t retire_before_s = 60;       // workers retire this long before their walltime
  std::uint32_t walltime_s = 0;             // jobs' time limit (0 = none)
  /// How long before its end a worker stops counting as capacity, so that its replacement is
  /// queued while it still works: the retirement margin plus a lead of at most a quarter of the
  /// walltime (a short walltime must not make every new worker look expiring at once).
  std::uint32_t replace_lead_s() const {
    return retire_before_s + std::min(retire_before_s, walltime_s / 4);
  }
};

/// The scheduler's view of one worker of the pool, each step.
struct PoolWorker {
  std::uint32_t id = 0;
  std::string job_id;
  bool idle = false;                          // nothing processing
  std::chrono::steady_clock::time_point idle_since;
  bool leaving = false;                       // retiring or about to expire: not capacity
};

class Pool {
 public:
  using Clock = std::chrono::steady_clock;
  Pool(PoolPolicy policy, std::unique_ptr<jobqueue::JobQueue> queue);

  const std::string& name() const { return policy_.name; }
  const PoolPolicy& policy() const { return policy_; }
  void scale(std::uint32_t n);
  void adapt(std::uint32_t minimum, std::uint32_t maximum, std::chrono::seconds idle_timeout);

  /// One decision step. `backlog`: ready + processing tasks this pool's workers could run;
  /// `avg_task_us`: mean task time seen (< 0 unknown). Returns workers to retire gracefully.
  /// Throws JobQueueError when a submission fails (the pool pauses after repeated failures).
  std::vector<std::uint32_t> step(std::size_t backlog, double avg_task_us,
                                  const std::vector<PoolWorker>& workers);
  /// Polls the job queue (rate-limited inside). Returns log lines, and fills `ended` with
  /// (job id, how it ended) for jobs that ended since the last poll.
  std::vector<std::string> poll(std::vector<std::pair<std::string, std::string>>* ended = nullptr);
  /// A worker of job `job_id` left: make sure the job is gone too.
  void worker_left(const std::string& job_id);
  /// Cancels every job.
  void close();

  protocol::PoolStatus status(std::uint32_t connected_workers) const;
  std::uint32_t desired() const { return desired_; }
  /// Live jobs by id, with the batch system's state and pending reason (for `herd status`).
  const std::map<std::string, jobqueue::JobInfo>& jobs() const { return jobs_; }

  /// A job that ended without being asked to (failed start, crash, time limit, ...), with
  /// the end of its output file(s): in `herd status` and the pool's last_failure.
  struct FailedJob {
    jobqueue::JobInfo info;
    bool had_worker = false;          // its worker had connected
    std::vector<std::string> files;   // its output file(s)
    std::vector<std::string> tail;    // their last lines
  };
  const std::deque<FailedJob>& failed_jobs() const { return failed_; }
  /// `herd logs JOB`: the output file(s) of a live or recently ended job of this pool, one
  /// source per file. False when the pool does not know the job.
  bool job_output(const std::string& id, std::size_t lines, std::vector<protocol::LogSource>& out) const;

 private:
  void submit(std::size_t count);

  PoolPolicy policy_;
  std::unique_ptr<jobqueue::JobQueue> queue_;
  std::map<std::string, jobqueue::JobInfo> jobs_;  // live jobs
  std::set<std::string> cancelled_;                // asked to stop; not capacity
  std::set<std::string> requeued_;                 // requeued since their worker connected
  std::uint32_t desired_ = 0;
  int consecutive_failures_ = 0;
  Clock::time_point paused_until_{};
  std::string paused_reason_, last_error_;
  std::uint64_t submitted_ = 0, failed_submissions_ = 0;
  // Job output (src/scheduler/pool_logs.cpp).
  void job_ended(const jobqueue::JobInfo& job, bool asked_to_stop);
  std::set<std::string> had_worker_;   // live jobs whose worker has connected
  std::deque<std::string> ended_;      // recently ended job ids (for `herd logs JOB`)
  std::deque<FailedJob> failed_;       // recent failures, newest last
  std::string last_failure_;
};

}  // namespace herd::scheduler
