// A source of workers: jobs that each run one worker. LocalProcessJobQueue starts processes on
// this machine; SlurmJobQueue submits batch jobs. The scheduler's Pool decides how many jobs
// there should be; a JobQueue only starts, watches and stops them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace herd::jobqueue {

enum class JobState { pending, running, ended };

struct JobInfo {
  std::string id;          // "12345_0" (Slurm array task) or "local-3"
  JobState state = JobState::pending;
  std::string detail;      // Slurm's state (PENDING, RUNNING, COMPLETED, FAILED, ...)
  std::string reason;      // pending reason, or how it ended
};

struct PollResult {
  std::vector<JobInfo> jobs;         // every job known: live ones, and ended ones once
  std::vector<std::string> log;      // lines worth logging
};

class JobQueue {
 public:
  virtual ~JobQueue() = default;
  /// "local" or "slurm".
  virtual std::string kind() const = 0;
  /// Starts `count` jobs at once (Slurm: one job array). Returns their ids; throws
  /// JobQueueError with the batch system's own message when it refuses.
  virtual std::vector<std::string> submit(std::size_t count) = 0;
  /// Stops these jobs (scancel / SIGTERM). Unknown ids are ignored.
  virtual void cancel(const std::vector<std::string>& ids) = 0;
  /// Current state of the jobs; rate-limited by the implementation.
  virtual PollResult poll() = 0;
  /// Stops every job it started and waits (bounded) until the batch system has them gone.
  virtual void close() = 0;
  /// Files job `id`'s stdout and stderr go to (one entry when they share a file; none when
  /// not kept), for `herd logs JOB` and the last lines shown when a job fails.
  virtual std::vector<std::string> output_files(const std::string& id) const {
    (void)id;
    return {};
  }
};

}  // namespace herd::jobqueue
