// Workers as child processes of the scheduler on this machine (LocalCluster, and tests).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "jobqueue/job_queue.hpp"

namespace herd::jobqueue {

struct LocalProcessOptions {
  std::string executable;                  // program run in worker mode (HERD_ROLE=worker)
  std::vector<std::string> worker_args;    // role arguments: --scheduler ... --nthreads ...
  std::map<std::string, std::string> env;  // extra environment
  std::string log_directory;               // "" = inherit stderr
};

class LocalProcessJobQueue : public JobQueue {
 public:
  explicit LocalProcessJobQueue(LocalProcessOptions options);
  ~LocalProcessJobQueue() override;
  std::string kind() const override { return "local"; }
  std::vector<std::string> submit(std::size_t count) override;
  void cancel(const std::vector<std::string>& ids) override;
  PollResult poll() override;
  void close() override;

 private:
  LocalProcessOptions options_;
  std::size_t started_ = 0;
  std::map<std::string, pid_t> children_;  // job id -> pid
};

}  // namespace herd::jobqueue
