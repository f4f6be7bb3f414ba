#pragma once
/// @file options.hpp
/// @brief Per-task options (Dask's submit keywords), set fluently.
///
/// @code
/// auto f = client.submit(herd::TaskOptions{}.key("load-A").priority(5).retries(2), load, "A");
/// @endcode

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace herd {

class TaskOptions {
 public:
  /// Name of the task in errors, logs and status ("" = "<function>-<id>").
  TaskOptions& key(std::string k) { key_ = std::move(k); return *this; }
  /// Higher runs first among tasks that are ready.
  TaskOptions& priority(std::int32_t p) { priority_ = p; return *this; }
  /// Times to re-run the task when it fails (it throws, its child crashes, its worker is lost),
  /// before its future fails. Preemptions of a checkpointable() task are counted apart.
  TaskOptions& retries(std::uint32_t n) { retries_ = n; return *this; }
  /// A custom resource the task holds while it runs, e.g. resource("gpu", 1); workers
  /// advertise theirs with `--resources gpu=2`.
  TaskOptions& resource(const std::string& name, double amount) { resources_[name] = amount; return *this; }

  /// GPUs the task holds while it runs (the resource "gpu"): it runs only on a worker with that
  /// many free devices, and this_task().gpus / cuda_stream name them. A fraction (0.5) lets
  /// tasks share a device on purpose.
  TaskOptions& gpus(double n) { resources_["gpu"] = n; return *this; }

  /// Cores the task holds while it runs (the resource "cpus", which every worker offers from its
  /// allocation: Slurm's cores and cgroup cpuset on its node, else its affinity mask, or
  /// `herd worker --cpus N`). A worker runs as many such tasks as its cores allow, whatever its
  /// thread slots; each runs pinned to n cores of the worker's mask that no other running task
  /// holds (this_task().cpus() names them): its thread, its isolated child and its shell
  /// command's processes; a shell command and an isolated child get OMP_NUM_THREADS,
  /// OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = n.
  ///
  /// @code
  /// auto f = client.submit(herd::TaskOptions{}.cpus(8).memory(16ull << 30), herd::shell,
  ///                        herd::ShellCommand{"./omp_solver input.dat"});
  /// @endcode
  TaskOptions& cpus(std::uint32_t n) {
    if (n == 0) resources_.erase("cpus");
    else resources_["cpus"] = n;
    return *this;
  }
  /// Memory the task holds while it runs (the resource "memory", counted in MiB, which every
  /// worker offers: --memory-limit, else its allocation's). Placement counts it; a shell command
  /// is killed when its processes' resident memory passes it, and an isolated() task's child may
  /// map at most this much beyond what it inherits (RLIMIT_AS): either fails with
  /// herd::TaskError of type "herd::MemoryLimitExceeded" naming the limit. Other C++ tasks are
  /// counted for placement only.
  TaskOptions& memory(std::uint64_t bytes) {
    if (bytes == 0) resources_.erase("memory");
    else resources_["memory"] = static_cast<double>((bytes + (1ull << 20) - 1) >> 20);
    return *this;
  }

  /// How long the task needs to run (seconds): it is not placed on a worker whose batch job
  /// ends before that.
  TaskOptions& duration(std::uint32_t seconds) { duration_s_ = seconds; return *this; }

  /// A task that saves checkpoints (herd::this_task().checkpoint_path()) and gives up when its
  /// worker drains (this_task().draining(): the job's SIGTERM, the walltime's drain, a pool
  /// that shrinks): it may be preempted this many times, each run resuming on another worker
  /// from the last checkpoint. Preemptions are counted apart from retries(), which count
  /// failures (exceptions, crashes, lost workers): `.checkpointable(3).retries(0)` survives three
  /// preemptions and fails at its first exception; when either budget is spent, the error says
  /// which. A run that fails while its worker drains is a preemption. (A gang keeps one budget:
  /// its retries and preemptions together.)
  TaskOptions& checkpointable(std::uint32_t preemptions = 3) { preemptions_ = preemptions; return *this; }

  /// A time limit for one run of the task: at the deadline its future fails with
  /// herd::TaskError of type "herd::TimeoutError" naming the limit, the worker frees the slot
  /// (a shell command is killed; an isolated() task's child process is killed; any other C++
  /// function cannot be stopped: its thread is left to end and its result is discarded).
  /// retries() re-runs a task that ran out of time. For a gang member, its limit fails the
  /// whole gang attempt (every rank's future, or a retry of all ranks).
  TaskOptions& timeout(double seconds) {
    timeout_ms_ = seconds <= 0 ? 0 : static_cast<std::uint32_t>(seconds * 1000.0 + 0.5);
    if (seconds > 0 && timeout_ms_ == 0) timeout_ms_ = 1;
    return *this;
  }

  /// Runs the function in a child process of the worker (fork()ed for this run), so that it
  /// can be stopped and cannot take the worker down: timeout() and cancel(true) kill the child
  /// (SIGKILL), and a child that dies (a segfault, std::abort, the out-of-memory killer) fails
  /// only this task, with herd::TaskCrashed naming the signal; the worker runs the next task.
  /// retries() re-runs a crashed task. A worker over its memory limit (--memory-limit, Slurm's
  /// job memory) kills its largest isolated child first, whose task fails with
  /// "herd::MemoryLimitExceeded", instead of leaving with all of its tasks. Limits: the result (or the exception's type and
  /// message) is copied once more, through a pipe; forking costs time in proportion to the
  /// worker's memory (its page tables); herd::secede(), rejoin() and get_client() throw
  /// herd::Error inside an isolated task (they would act on the child's copy of the worker);
  /// herd::task_log() lines are lost (std::cout / std::cerr are kept); a lock that another
  /// thread of the worker held at the fork (rare: the task's own libraries) stays held in the
  /// child, which may then hang (a timeout() still kills it); CUDA cannot be used in the
  /// child; a process the task started is killed when the child ends. Not for gang members
  /// (submit_gang throws std::invalid_argument).
  ///
  /// @code
  /// auto f = client.submit(herd::TaskOptions{}.isolated().timeout(60), risky, input);
  /// @endcode
  TaskOptions& isolated(bool on = true) { isolated_ = on; return *this; }
  /// isolated(), and the child may map at most `bytes` beyond the address space it inherits
  /// from the worker (RLIMIT_AS): an allocation past it throws std::bad_alloc in the task,
  /// which fails as any exception does (retries() apply). 0 = no cap.
  ///
  /// @code
  /// auto f = client.submit(herd::TaskOptions{}.isolated_memory(256 << 20), parse, path);
  /// @endcode
  TaskOptions& isolated_memory(std::uint64_t bytes) { isolated_ = true; isolated_memory_ = bytes; return *this; }

  /// Runs only on these workers: each a worker's name ("local-3"), its host, or its data
  /// port address. No connected one: the task waits, and its status says why (no-worker).
  TaskOptions& workers(std::vector<std::string> names) { workers_ = std::move(names); return *this; }
  /// With workers(): they are a preference: one of them when it can take the task now, else
  /// any worker (Dask's allow_other_workers).
  TaskOptions& allow_other_workers(bool allow = true) { allow_other_workers_ = allow; return *this; }
  /// Runs only on workers of this pool (cluster.toml's [pool.NAME]; "" = any).
  TaskOptions& pool(std::string name) { pool_ = std::move(name); return *this; }

  /// Whole nodes for one task, for an MPI program (HyperQueue's multi-node tasks): the
  /// scheduler holds workers on `n` distinct hosts of one allocation (the workers of one
  /// Slurm job: a pool with `nodes = n` or more), all at once and for this task alone (no other
  /// task runs on them meanwhile), and runs the task once, on the first of them. There,
  /// this_task().nodes names the hosts (its own first) and this_task().node_file a file that
  /// lists them one a line; a shell command (herd::shell, a shell task) gets them as
  /// HERD_NODE_FILE, HERD_NUM_NODES and HERD_NODES (space-separated), so that
  /// `mpirun --hostfile "$HERD_NODE_FILE" -np "$HERD_NUM_NODES" ./prog` starts one rank per
  /// host. A held worker that is lost fails the run with herd::WorkerLostError naming its host
  /// (retries() run it again on healthy nodes). 0 = an ordinary task. Not for gang members.
  ///
  /// @code
  /// auto f = client.submit(herd::TaskOptions{}.nodes(3).retries(1), herd::shell,
  ///                        herd::ShellCommand{"mpirun --hostfile $HERD_NODE_FILE -np 3 ./solver"});
  /// @endcode
  TaskOptions& nodes(std::uint32_t n) { nodes_ = n; return *this; }
  std::uint32_t nodes() const { return nodes_; }

  /// Submits the task under a detached campaign: it runs on, and its result is kept, when this
  /// client drops its future or leaves (an ssh session that dropped); another client gets the
  /// campaign's futures back by name (Client::campaign_futures<R>(name)) and frees them with
  /// Client::release_campaign(name). `herd status` lists campaigns.
  TaskOptions& campaign(std::string name) { campaign_ = std::move(name); return *this; }
  const std::string& key() const { return key_; }
  const std::string& campaign() const { return campaign_; }
  const std::vector<std::string>& workers() const { return workers_; }
  bool allow_other_workers() const { return allow_other_workers_; }
  const std::string& pool() const { return pool_; }
  std::uint32_t timeout_ms() const { return timeout_ms_; }
  bool isolated() const { return isolated_; }
  std::uint64_t isolated_memory() const { return isolated_memory_; }
  std::uint32_t duration() const { return duration_s_; }
  std::int32_t priority() const { return priority_; }
  std::uint32_t retries() const { return retries_; }
  std::uint32_t preemptions() const { return preemptions_; }
  const std::map<std::string, double>& resources() const { return resources_; }

 private:
  std::string key_;
  std::int32_t priority_ = 0;
  std::uint32_t retries_ = 0;
  std::uint32_t preemptions_ = 0;
  std::map<std::string, double> resources_;
  std::uint32_t duration_s_ = 0;
  std::uint32_t timeout_ms_ = 0;
  std::vector<std::string> workers_;
  bool allow_other_workers_ = false;
  std::string pool_;
  std::string campaign_;
  bool isolated_ = false;
  std::uint64_t isolated_memory_ = 0;
  std::uint32_t nodes_ = 0;
};

}  // namespace herd
