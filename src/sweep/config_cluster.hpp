// A cluster described by a scheduler configuration file (`herd scheduler --config`'s TOML:
// local and Slurm pools, jobs, adapt ranges), for `herd sweep --config cluster.toml`. The
// scheduler is this program in scheduler mode, owned like LocalCluster's: it and its jobs go
// when the sweep ends or dies.
#pragma once

#include <memory>
#include <string>

#include "client/scheduler_process.hpp"
#include "herd/cluster.hpp"

namespace herd::sweep {

class ConfigCluster : public Cluster {
 public:
  /// Reads and checks the file now. @throws std::invalid_argument naming the problem.
  explicit ConfigCluster(std::string path);
  ~ConfigCluster() override;
  std::string start() override;
  int expected_workers() const override { return 0; }  // Slurm queues can wait for hours
  void close() override;

 private:
  std::string path_, log_path_;
  std::unique_ptr<detail::SchedulerProcess> scheduler_;
};

}  // namespace herd::sweep
