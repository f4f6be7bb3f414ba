#pragma once
/// @file slurm.hpp
/// @brief SlurmCluster: a scheduler on this (login) node whose workers are Slurm jobs.
///
/// Options are named as dask-jobqueue names them where that fits.
/// @code
/// herd::Client client{herd::SlurmCluster{herd::SlurmOptions{}.partition("cpu").cores(4)
///                                            .memory("8G").walltime("01:00:00")}};
/// client.scale(20);          // 20 workers: one job array, not 20 sbatch calls
/// client.adapt(2, 50);       // or let the backlog decide
/// @endcode

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "herd/cluster.hpp"

namespace herd {

/// @brief One pool of Slurm workers: what each job asks for and how it starts its worker.
class SlurmOptions {
 public:
  using Env = std::map<std::string, std::string>;
  using Resources = std::map<std::string, double>;

#define HERD_SLURM_SETTER(type, name)                  \
  SlurmOptions& name(type v) & {                       \
    name##_ = std::move(v);                            \
    return *this;                                      \
  }                                                    \
  SlurmOptions&& name(type v) && { return std::move(name(std::move(v))); } \
  const type& name() const { return name##_; }

  /// Pool name ("default"); workers of this pool advertise it, and scale()/adapt() use it.
  HERD_SLURM_SETTER(std::string, pool)
  /// CPUs per job (`--cpus-per-task`); also the worker's task slots unless nthreads() is set.
  HERD_SLURM_SETTER(int, cores)
  /// Task slots per worker (0 = cores()).
  HERD_SLURM_SETTER(int, nthreads)
  /// Memory per job (`--mem`), e.g. "4G" ("" = the partition's default).
  HERD_SLURM_SETTER(std::string, memory)
  /// GPUs per node of each job (`--gres=gpu:N`); the worker then offers the resource gpu=N.
  /// With processes() = P, N must be a multiple of P: each worker of the node gets N/P GPUs of
  /// its own (its CUDA_VISIBLE_DEVICES) and offers gpu=N/P.
  HERD_SLURM_SETTER(int, gpus)
  /// Partition (`--partition`); dask-jobqueue calls it queue.
  HERD_SLURM_SETTER(std::string, partition)
  /// Account (`--account`).
  HERD_SLURM_SETTER(std::string, account)
  /// Quality of service (`--qos`).
  HERD_SLURM_SETTER(std::string, qos)
  /// Time limit of each job (`--time`), e.g. "01:00:00", "2-00:00:00", "30".
  HERD_SLURM_SETTER(std::string, walltime)
  /// Job name (`--job-name`; default "herd-<pool>").
  HERD_SLURM_SETTER(std::string, job_name)
  /// Directory for the jobs' output and error files; created before submission.
  HERD_SLURM_SETTER(std::string, log_directory)
  /// Where each worker spills results to disk when memory runs short, on the compute node
  /// (dask-jobqueue's local_directory; exported as HERD_LOCAL_DIRECTORY, taken literally;
  /// "" = $SLURM_TMPDIR when Slurm sets it, else $TMPDIR or /tmp).
  HERD_SLURM_SETTER(std::string, local_directory)
  /// Extra `#SBATCH` directives, e.g. {"--constraint=skylake", "--exclusive"}.
  HERD_SLURM_SETTER(std::vector<std::string>, job_extra_directives)
  /// Lines run before the worker, e.g. {"module load gcc/12", "source venv/bin/activate"}.
  HERD_SLURM_SETTER(std::vector<std::string>, job_script_prologue)
  /// Extra arguments for the worker, e.g. {"--load", "/home/me/libtasks.so"}.
  HERD_SLURM_SETTER(std::vector<std::string>, worker_extra_args)
  /// Program the job runs in worker mode (default: the program that started the scheduler).
  HERD_SLURM_SETTER(std::string, worker_executable)
  /// Environment variables exported in the job script.
  HERD_SLURM_SETTER(Env, env)
  /// Custom resources each worker offers, e.g. {{"bigmem", 1}}.
  HERD_SLURM_SETTER(Resources, resources)
  /// Signal Slurm sends before the time limit (`--signal=B:SIG@secs`); never USR1 (NCCL).
  HERD_SLURM_SETTER(std::string, warning_signal)
  /// Seconds before the time limit at which that signal comes.
  HERD_SLURM_SETTER(int, warning_seconds)
  /// Seconds before its time limit at which a worker stops taking tasks and is replaced.
  HERD_SLURM_SETTER(int, retire_before)
  /// Jobs to start with (scale() changes it later).
  HERD_SLURM_SETTER(int, jobs)
  /// Network interface every worker listener binds and advertises (data port, gang ring, NCCL),
  /// e.g. "ib0" (dask-jobqueue's interface; "" = the interface that routes to the scheduler).
  HERD_SLURM_SETTER(std::string, interface)
  /// Workers per node of each job (dask-jobqueue's processes): they share the node's cores()
  /// and memory(), each with cores()/processes() task slots (unless nthreads() is set). On
  /// one node they are background processes of the batch script; on several, srun tasks.
  HERD_SLURM_SETTER(int, processes)
  /// Nodes per job (`--nodes`): one worker per node (times processes()), started with srun;
  /// cores(), memory() and gpus() are per node.
  HERD_SLURM_SETTER(int, nodes)
  /// Generated `#SBATCH` lines that contain one of these strings are left out (e.g. {"--mem"}
  /// on a site that refuses it); job_extra_directives() are kept.
  HERD_SLURM_SETTER(std::vector<std::string>, job_directives_skip)
  /// Lines run after the worker(s) ended, e.g. {"rm -rf $TMPDIR/herd"}; the job's exit status
  /// is still the workers'.
  HERD_SLURM_SETTER(std::vector<std::string>, job_script_epilogue)
  /// First line of the script (default "#!/usr/bin/env bash"; the script needs bash).
  HERD_SLURM_SETTER(std::string, shebang)
  /// Extra arguments of sbatch itself, e.g. {"--reservation=mine"} (before the script's name).
  HERD_SLURM_SETTER(std::vector<std::string>, submit_command_extra)
#undef HERD_SLURM_SETTER

  /// Workers each job brings: processes() * nodes().
  int workers_per_job() const { return processes_ * nodes_; }

 private:
  std::string pool_ = "default";
  int cores_ = 1;
  int nthreads_ = 0;
  std::string memory_;
  int gpus_ = 0;
  std::string partition_, account_, qos_, walltime_ = "01:00:00", job_name_;
  std::string log_directory_ = "herd-logs";
  std::string local_directory_;
  std::vector<std::string> job_extra_directives_, job_script_prologue_, worker_extra_args_;
  std::string worker_executable_;
  std::map<std::string, std::string> env_;
  std::map<std::string, double> resources_;
  std::string warning_signal_ = "TERM";
  int warning_seconds_ = 60;
  int retire_before_ = 60;
  int jobs_ = 0;
  std::string interface_;
  int processes_ = 1;
  int nodes_ = 1;
  std::vector<std::string> job_directives_skip_, job_script_epilogue_, submit_command_extra_;
  std::string shebang_ = "#!/usr/bin/env bash";
};

/// @brief The exact batch script a pool submits (the array size is passed to sbatch as
/// `--array=0-N`, so the script is the same for every scale()).
/// @param scheduler_address where the workers connect
std::string job_script(const SlurmOptions& options, const std::string& scheduler_address);

/// @brief Time limit in seconds from Slurm's formats: "MM", "MM:SS", "HH:MM:SS", "D-HH",
/// "D-HH:MM", "D-HH:MM:SS". @throws std::invalid_argument naming the value.
long walltime_seconds(const std::string& walltime);

/// @brief Bytes in a Slurm memory size: "8G", "512M", "1T", "4000" (megabytes, as --mem);
/// K, M, G and T are powers of 1024, and "GB"/"GiB" are read as "G".
/// @throws std::invalid_argument naming the value.
long long memory_bytes(const std::string& memory);

/// @brief A scheduler process on this node with one or more pools of Slurm workers.
///
/// The scheduler submits, watches (squeue, sacct) and cancels the jobs; closing the cluster,
/// or the death of this process, cancels every job it submitted.
class SlurmCluster : public Cluster {
 public:
  explicit SlurmCluster(SlurmOptions options = {});
  SlurmCluster(SlurmCluster&&) noexcept;
  SlurmCluster& operator=(SlurmCluster&&) noexcept;
  ~SlurmCluster() override;

  /// Adds another pool (e.g. "gpu" on a GPU partition beside "cpu").
  SlurmCluster& add_pool(SlurmOptions options) &;
  SlurmCluster&& add_pool(SlurmOptions options) && { return std::move(add_pool(std::move(options))); }
  /// ZeroMQ endpoint the scheduler binds (default: every interface, a free port).
  SlurmCluster& listen(std::string endpoint) &;
  SlurmCluster&& listen(std::string endpoint) && { return std::move(listen(std::move(endpoint))); }
  /// Leaves the scheduler (and its jobs) running when this cluster object closes or this
  /// process exits, killed or not: detached campaigns (TaskOptions::campaign) go on, and a later
  /// client connects to scheduler_address() and attaches by name. close() prints how to
  /// reconnect, and how to stop it (`kill PID`: it cancels its jobs). The scheduler ignores
  /// SIGHUP (a login session that ends).
  SlurmCluster& keep_scheduler(bool keep = true) &;
  SlurmCluster&& keep_scheduler(bool keep = true) && { return std::move(keep_scheduler(keep)); }
  /// Environment variables for the scheduler process (e.g. SLURM_CONF).
  SlurmCluster& scheduler_env(std::string name, std::string value) &;
  SlurmCluster&& scheduler_env(std::string name, std::string value) && {
    return std::move(scheduler_env(std::move(name), std::move(value)));
  }

  /// The script pool `pool` submits ("" = the first pool), once started (address known).
  std::string job_script(const std::string& pool = "") const;
  /// The scheduler's configuration file text (TOML), as `herd scheduler --config` reads it.
  std::string config_text() const;

  std::string start() override;
  int expected_workers() const override { return 0; }  // queues can wait for hours
  /// Stops the scheduler, which cancels every job; if the scheduler had died, cancels the jobs
  /// it recorded itself.
  void close() override;
  /// Process id of the scheduler (0 before start()).
  int scheduler_pid() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace herd
