#pragma once
/// @file cluster.hpp
/// @brief Cluster objects start a scheduler and its workers; a Client owns one.
///
/// @code
/// herd::Client client{herd::LocalCluster{}.workers(4).threads_per_worker(2)};
/// @endcode

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace herd {

/// @brief Something that runs a scheduler a Client can connect to.
class Cluster {
 public:
  virtual ~Cluster() = default;
  /// Starts the scheduler (and workers) if not yet started; returns its address.
  virtual std::string start() = 0;
  /// Number of workers the client should wait for before the first submit (0 = none).
  virtual int expected_workers() const = 0;
  /// Stops the scheduler and every worker; idempotent.
  virtual void close() = 0;
};

/// @brief A scheduler process and worker processes on this machine: the embedded default.
///
/// The scheduler and the workers are real processes: this program's own executable started
/// again in scheduler or worker mode (functions registered with HERD_TASK are there), or the
/// executable given by worker_executable(). They all exit when the cluster is closed, when the
/// Client is destroyed, and also when this process dies, even by SIGKILL.
class LocalCluster : public Cluster {
 public:
  /// @param n_workers worker processes (default: 2)
  /// @param threads_per_worker task slots in each (default: 1)
  explicit LocalCluster(int n_workers = 2, int threads_per_worker = 1);
  LocalCluster(LocalCluster&&) noexcept;
  LocalCluster& operator=(LocalCluster&&) noexcept;
  ~LocalCluster() override;

  LocalCluster& workers(int n) &;
  LocalCluster&& workers(int n) && { return std::move(workers(n)); }
  LocalCluster& threads_per_worker(int n) &;
  LocalCluster&& threads_per_worker(int n) && { return std::move(threads_per_worker(n)); }
  /// Executable the workers run (default: this program). Use the `herd` binary with
  /// worker_args({"--load", "libtasks.so"}) for task libraries.
  LocalCluster& worker_executable(std::string path) &;
  LocalCluster&& worker_executable(std::string path) && { return std::move(worker_executable(std::move(path))); }
  /// Extra arguments for every worker, e.g. {"--resources", "gpu=1"}.
  LocalCluster& worker_args(std::vector<std::string> args) &;
  LocalCluster&& worker_args(std::vector<std::string> args) && { return std::move(worker_args(std::move(args))); }
  /// GPUs for each worker: worker i gets its own CUDA_VISIBLE_DEVICES slice of the devices this
  /// process may use (CUDA_VISIBLE_DEVICES, Slurm's allocation, else every GPU), so two workers
  /// never claim the same GPU; workers beyond the supply get none. 0 (default): workers inherit
  /// this process's devices. Each worker advertises the GPUs it got (resource "gpu").
  /// @code
  /// herd::Client client{herd::LocalCluster{4}.gpus_per_worker(1)};  // 4 GPUs: one each
  /// @endcode
  LocalCluster& gpus_per_worker(int n) &;
  LocalCluster&& gpus_per_worker(int n) && { return std::move(gpus_per_worker(n)); }
  /// Environment variables for the scheduler and the workers.
  LocalCluster& env(std::string name, std::string value) &;
  LocalCluster&& env(std::string name, std::string value) && { return std::move(env(std::move(name), std::move(value))); }
  /// How long start() waits for the scheduler to listen.
  LocalCluster& start_timeout(std::chrono::milliseconds t) &;
  LocalCluster&& start_timeout(std::chrono::milliseconds t) && { return std::move(start_timeout(t)); }
  /// Directory for the scheduler's and workers' log files ("" = inherit stderr).
  LocalCluster& log_directory(std::string path) &;
  LocalCluster&& log_directory(std::string path) && { return std::move(log_directory(std::move(path))); }

  std::string start() override;
  int expected_workers() const override;
  void close() override;

  /// Process id of the scheduler (0 before start()).
  int scheduler_pid() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// @brief Call first in main() of a program whose workers run the same executable: in a
/// worker or scheduler process it runs that role and exits, so nothing of main() runs twice.
/// Optional: constructing a Client or a LocalCluster does the same.
void init(int argc = 0, char** argv = nullptr);

}  // namespace herd
