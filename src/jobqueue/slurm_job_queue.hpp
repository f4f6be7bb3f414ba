// Workers as Slurm jobs: sbatch --parsable --array for submission (one call per scale step),
// one squeue call per poll for every job of the pool, sacct for jobs that left the queue, and
// one scancel for every job to stop. The commands run on the CommandRunner's threads through
// Boost.Process (herd::shell), each with a timeout: a slow or frozen slurmctld delays answers,
// never the scheduler's event loop. At most one poll is under way at a time (the Pool asks for
// the next only once the last answered).
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "herd/slurm.hpp"
#include "jobqueue/job_queue.hpp"

namespace herd::jobqueue {

struct SlurmQueueOptions {
  SlurmOptions options;                       // the pool's job options
  std::string scheduler_address;              // what the workers connect to
  double command_timeout_s = 30;              // sbatch / squeue / scancel / sacct
  std::string jobs_file;                      // every submitted id is appended here ("" = none),
                                              //   so the owner can scancel them if we die
};

class SlurmJobQueue : public JobQueue {
 public:
  explicit SlurmJobQueue(SlurmQueueOptions options);
  ~SlurmJobQueue() override;
  std::string kind() const override { return "slurm"; }
  void submit(std::size_t count, SubmitDone done) override;
  void cancel(const std::vector<std::string>& ids, CancelDone done) override;
  void poll(PollDone done) override;
  void close() override;
  std::vector<std::string> output_files(const std::string& id) const override;  // job_output.cpp

  /// The script submit() hands to sbatch.
  const std::string& script() const { return script_; }

 private:
  struct Job {
    JobInfo info;
    std::chrono::steady_clock::time_point submitted;
    int unknown_polls = 0;  // polls in which neither squeue nor sacct knew it
  };
  SlurmQueueOptions options_;
  std::string script_;
  std::string script_path_;
  std::string submit_dir_;  // where sbatch ran: relative --output paths start there
  std::map<std::string, Job> jobs_;  // live jobs (not yet reported ended)
  int submitting_ = 0;               // submissions under way (their ids are not known yet)
  // An sbatch that timed out may still have made its jobs: the next polls look for jobs of
  // this pool's script that it does not know, and adopt them (never a job left running unseen).
  int orphan_checks_ = 0;
};

}  // namespace herd::jobqueue
