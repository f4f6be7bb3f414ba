#include "sweep/config_cluster.hpp"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "common/util.hpp"
#include "herd/error.hpp"
#include "jobqueue/pool_config.hpp"

namespace herd::sweep {

ConfigCluster::ConfigCluster(std::string path)
    : path_(std::filesystem::absolute(path).string()), scheduler_(std::make_unique<detail::SchedulerProcess>()) {
  const jobqueue::SchedulerConfig config = jobqueue::load_config(path_);
  bool starts_workers = false;
  std::string log_dir = "herd-logs";
  for (const auto& p : config.pools) {
    starts_workers = starts_workers || p.options.jobs() > 0 || p.adapt_maximum > 0;
    if (p.kind == "slurm" && log_dir == "herd-logs") log_dir = p.options.log_directory();
  }
  if (!starts_workers) {
    throw std::invalid_argument(path_ + ": no pool starts workers (give one `jobs = N`, or adapt_minimum and "
                                "adapt_maximum)");
  }
  // Beside the Slurm workers' logs, where SlurmCluster puts its scheduler's log too.
  log_path_ = log_dir + "/herd-scheduler-" + std::to_string(::getpid()) + ".log";
}

ConfigCluster::~ConfigCluster() { close(); }

std::string ConfigCluster::start() {
  if (!scheduler_->address().empty()) return scheduler_->address();
  (void)util::make_private_directories(std::filesystem::path(log_path_).parent_path().string());  // start() says why it fails
  try {
    return scheduler_->start({"--config=" + path_}, {}, log_path_, std::chrono::seconds(60));
  } catch (const ClusterError& e) {
    throw ClusterError(std::string("herd sweep --config: ") + e.what() + " (log: " + log_path_ + ")");
  }
}

void ConfigCluster::close() {
  if (scheduler_) scheduler_->stop(std::chrono::seconds(60));
}

}  // namespace herd::sweep
