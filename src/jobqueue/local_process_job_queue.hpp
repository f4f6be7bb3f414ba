// Workers as child processes of the scheduler on this machine (LocalCluster, and tests).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "jobqueue/job_queue.hpp"

namespace herd::jobqueue {

/// Environment variable with the workers' GPU slices (see LocalProcessOptions::gpu_slices).
inline constexpr const char* kGpuSlicesEnv = "HERD_LOCAL_GPU_SLICES";

struct LocalProcessOptions {
  std::string executable;                  // program run in worker mode (HERD_ROLE=worker)
  std::vector<std::string> worker_args;    // role arguments: --scheduler ... --nthreads ...
  std::map<std::string, std::string> env;  // extra environment
  std::string log_directory;               // "" = inherit stderr
  // CUDA_VISIBLE_DEVICES of each worker (LocalCluster::gpus_per_worker): a new worker gets the
  // first slice that no running worker holds, or "" (no GPU) when all are held. Empty: no
  // assignment, workers inherit this process's devices. Default: from $HERD_LOCAL_GPU_SLICES
  // ("0,1;2,3"; "none" = every worker gets no GPU), which LocalCluster sets for its scheduler.
  std::vector<std::string> gpu_slices;
};

class LocalProcessJobQueue : public JobQueue {
 public:
  explicit LocalProcessJobQueue(LocalProcessOptions options);
  ~LocalProcessJobQueue() override;
  std::string kind() const override { return "local"; }
  // Starting, signalling and reaping a child take no time worth a thread: these act at once
  // and answer through the runner (so answers always arrive the same way, from drain()).
  void submit(std::size_t count, SubmitDone done) override;
  void cancel(const std::vector<std::string>& ids, CancelDone done) override;
  void poll(PollDone done) override;
  void close() override;
  std::vector<std::string> output_files(const std::string& id) const override {
    if (options_.log_directory.empty()) return {};
    return {options_.log_directory + "/" + id + ".log"};  // stdout and stderr (see submit)
  }

 private:
  std::string take_gpu_slice(const std::string& id);

  LocalProcessOptions options_;
  std::size_t started_ = 0;
  std::map<std::string, pid_t> children_;  // job id -> pid
  // Cancelled children (SIGTERM sent) -> when they get SIGKILL if still there: a worker that
  // does not leave (stuck, or draining a task that never ends) is killed, as scancel does.
  std::map<std::string, std::chrono::steady_clock::time_point> kill_at_;
  std::map<std::string, std::size_t> gpu_slice_of_;  // job id -> index into gpu_slices
};

}  // namespace herd::jobqueue
