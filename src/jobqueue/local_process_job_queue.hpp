// Workers as child processes of the scheduler on this machine (LocalCluster, and tests).
#pragma once

#include <sys/types.h>

#include <chrono>
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
  const std::string& name() const override { return name_; }
  void scale(std::size_t n) override;
  std::size_t target() const override { return target_; }
  std::size_t live() const override { return children_.size(); }
  std::vector<std::string> poll() override;
  void close() override;

 private:
  struct Child {
    pid_t pid;
    std::string name;
  };
  void start_one();

  std::string name_ = "local";
  LocalProcessOptions options_;
  std::size_t target_ = 0;
  std::size_t started_ = 0;
  std::vector<Child> children_;
  std::chrono::steady_clock::time_point last_restart_{};
};

}  // namespace herd::jobqueue
