// A source of workers: jobs that each run one worker. LocalProcessJobQueue starts processes on
// this machine; SlurmJobQueue submits batch jobs. The scheduler's Pool decides how many jobs
// there should be; a JobQueue only starts, watches and stops them.
//
// Every call returns at once: the work (sbatch, squeue + sacct, scancel) runs on the
// CommandRunner's threads, each command with its own timeout, and the answer comes back
// through a callback that runs on the event loop's thread, in CommandRunner::drain(). So a
// slow or frozen batch system never stops the loop that heartbeats workers and clients.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobqueue/command_runner.hpp"

namespace herd::jobqueue {

enum class JobState { pending, running, ended };

struct JobInfo {
  std::string id;          // "12345_0" (Slurm array task) or "local-3"
  JobState state = JobState::pending;
  std::string detail;      // Slurm's state (PENDING, RUNNING, COMPLETED, FAILED, ...)
  std::string reason;      // pending reason, or how it ended
};

/// A job that holds its place but does not run: SUSPENDED or STOPPED (its worker, if any, is
/// frozen), or held (JobHeldUser, JobHeldAdmin, REQUEUE_HOLD).
inline bool stalled(const JobInfo& job) {
  return job.detail == "SUSPENDED" || job.detail == "STOPPED" || job.detail == "REQUEUE_HOLD" ||
         job.reason.rfind("JobHeld", 0) == 0;
}
/// Stalled with its processes frozen (a worker there cannot answer, through no fault of its own).
inline bool suspended(const JobInfo& job) { return job.detail == "SUSPENDED" || job.detail == "STOPPED"; }

struct PollResult {
  std::vector<JobInfo> jobs;         // every job known: live ones, and ended ones once
  std::vector<std::string> log;      // lines worth logging
  std::string error;                 // "" = the batch system answered; else why it did not
                                     //   (squeue failed or timed out): `jobs` is what was known
};

struct SubmitResult {
  std::vector<std::string> ids;      // the new jobs
  std::string error;                 // "" = accepted; else the batch system's own words
};

class JobQueue {
 public:
  using SubmitDone = std::function<void(SubmitResult)>;
  using PollDone = std::function<void(PollResult)>;
  using CancelDone = std::function<void(const std::string& error)>;

  virtual ~JobQueue() = default;
  /// "local" or "slurm".
  virtual std::string kind() const = 0;
  /// The threads commands run on, and through which answers come back; before any call.
  void attach(CommandRunner& runner) { runner_ = &runner; }
  bool attached() const { return runner_ != nullptr; }

  /// Starts `count` jobs at once (Slurm: one job array); `done` gets their ids or the batch
  /// system's refusal.
  virtual void submit(std::size_t count, SubmitDone done) = 0;
  /// Stops these jobs, all in one command (scancel ID...); `done` gets "" or the error (jobs
  /// that already ended are no error). Unknown ids are ignored.
  virtual void cancel(const std::vector<std::string>& ids, CancelDone done) = 0;
  /// Asks for the state of every live job (Slurm: one squeue, and one sacct for those that left
  /// the queue).
  virtual void poll(PollDone done) = 0;
  /// Stops every job it started and waits (bounded) until the batch system has them gone,
  /// including jobs of a submission still under way. Blocks: for shutdown only.
  virtual void close() = 0;
  /// Files job `id`'s stdout and stderr go to (one entry when they share a file; none when
  /// not kept), for `herd logs JOB` and the last lines shown when a job fails. May look at the
  /// file system: call it from work on the runner, not from the loop. Thread-safe.
  virtual std::vector<std::string> output_files(const std::string& id) const {
    (void)id;
    return {};
  }

 protected:
  CommandRunner& runner() const {
    if (runner_ == nullptr) throw std::logic_error("JobQueue used before attach(CommandRunner&)");
    return *runner_;
  }

 private:
  CommandRunner* runner_ = nullptr;
};

}  // namespace herd::jobqueue
