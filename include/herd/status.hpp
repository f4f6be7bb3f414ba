#pragma once
/// @file status.hpp
/// @brief herd::ClusterStatus: what `herd status`, Client::status() and the dashboard show.
///
/// @code
/// herd::ClusterStatus s = client.status();
/// std::cout << s.workers.size() << " workers, " << s.finished_total << " tasks done\n";
/// std::cout << s.to_text();          // the `herd status` table; s.to_json() for scripts
/// @endcode

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace herd {

/// @brief A worker pool as the scheduler sees it (Client::pools(), ClusterStatus::pools).
struct PoolInfo {
  std::string name;     ///< pool name, e.g. "cpu"
  std::string kind;     ///< "local" or "slurm"
  int target = 0;       ///< workers wanted now
  bool adaptive = false;
  int minimum = 0, maximum = 0;
  int pending = 0;      ///< jobs waiting in the queue
  int running = 0;      ///< jobs running
  int workers = 0;      ///< workers connected
  std::map<std::string, int> pending_reasons;  ///< Slurm's reasons, e.g. {"Priority": 3}
  std::string paused;      ///< why submissions are paused ("" = not paused)
  std::string last_error;  ///< last submission error, in the batch system's words
  /// Last job that failed (ended unasked: a failed start, a crash, its time limit), and the
  /// end of its output file, e.g. "job 12_0 FAILED (exit code 3:0) before its worker
  /// connected; its output ends with:\n  module: command not found" ("" = none failed).
  std::string last_failure;
  /// Jobs in a row that ended before their worker connected (or just after). From a few on the
  /// pool submits one job at a time with growing pauses, then pauses (`paused` says why, with
  /// the job's output) until scale() or adapt().
  int crashes = 0;
  int stalled = 0;          ///< jobs suspended, stopped or held (not capacity after a while)
  /// The batch system does not answer (squeue failing or timing out): since when, why, when
  /// the next try is ("" = it answers). The pool's workers go on meanwhile.
  std::string batch_error;
  double last_answer_s = -1;  ///< seconds since the batch system last answered (-1 = not yet)
  int workers_per_job = 1;    ///< processes x nodes of each job
  long walltime_s = 0;        ///< its jobs' time limit in seconds (0 = none)
  long retire_before_s = 0;   ///< its workers retire this long before the time limit
  std::uint64_t submitted = 0;  ///< jobs submitted since the scheduler started
  bool user_paused = false;     ///< paused with `herd pool pause` / Client::pause_pool(): no job
                                ///< is submitted until resumed
  /// Workers the pool would let go but keeps: they hold results only they have and no worker
  /// stays to take them, each "NAME: holds 2 result(s) only it has (16 MiB): KEY, KEY".
  std::vector<std::string> kept_for_data;
  int cores_per_job = 0;            ///< cores each job asks for (`herd scale POOL --cores C`)
  long long memory_per_job = 0;     ///< bytes each job asks for (0 = none asked)
};

/// @brief One connected worker.
/// @brief A GPU a worker may use (what the batch system gave its job).
struct GpuInfo {
  std::string id;            ///< as the batch system named it, e.g. "3" or "GPU-8f1c..."
  std::string name;          ///< model, e.g. "NVIDIA H100 80GB HBM3" ("" = unknown)
  std::uint64_t memory = 0;  ///< bytes (0 = unknown)
};

struct WorkerInfo {
  std::string name;         ///< e.g. "local-3", or host:pid
  std::string host;         ///< hostname
  std::string address;      ///< data port
  std::string job_id;       ///< Slurm job id ("" outside Slurm)
  std::string pool;         ///< pool that launched it ("" = none)
  int nthreads = 0;         ///< task slots
  int busy = 0;             ///< tasks running now (at most nthreads)
  int processing = 0;       ///< tasks assigned (running + queued on it)
  std::uint64_t stored = 0;       ///< results it holds
  std::uint64_t memory_rss = 0;   ///< resident bytes
  std::uint64_t memory_limit = 0; ///< bytes, 0 = none
  std::map<std::string, double> resources;  ///< e.g. {"gpu": 1}
  std::int64_t end_time = 0;      ///< unix seconds when its job ends (0 = never)
  double time_left_s = -1;        ///< seconds until end_time (-1 = no walltime)
  bool retiring = false;          ///< draining, takes no new tasks
  std::vector<GpuInfo> gpus;      ///< its GPUs
  std::uint64_t spilled_bytes = 0; ///< results it wrote to its local directory (memory pressure)
  std::string paused;             ///< why it starts no new task (memory), "" = not paused
  bool link = false;              ///< its messages to and from the scheduler travel on a control link (false: ZeroMQ)
  /// Its pool would let it go, but it holds results only it has and no worker stays to take
  /// them: "2 result(s) only it has (16 MiB): KEY, KEY" ("" = not kept).
  std::string kept_for_data;
};

/// @brief One batch job of a pool.
struct JobInfo {
  std::string pool;    ///< pool that submitted it
  std::string id;      ///< e.g. "12345_0"
  std::string state;   ///< "pending", "running" or "ended"
  std::string detail;  ///< the batch system's state, e.g. PENDING
  std::string reason;  ///< pending reason (Priority, Resources, ...) or how it ended
  std::string worker;  ///< the worker it runs ("" = none yet)
  std::string output;  ///< failed jobs: its output file(s) (`herd logs JOB` shows them)
  std::vector<std::string> output_tail;  ///< failed jobs: the last lines of its output
};

/// @brief One finished task run (the dashboard's task stream).
struct TaskEventInfo {
  std::string key, function, worker;
  std::int64_t start_ms = 0;  ///< unix milliseconds
  std::int64_t end_ms = 0;    ///< unix milliseconds
  bool ok = true;             ///< false: it raised
};

/// @brief A detached campaign (TaskOptions::campaign): Client::campaigns(), `herd status`.
struct CampaignInfo {
  std::string name;
  std::uint64_t total = 0;    ///< tasks submitted under it
  std::uint64_t done = 0;     ///< results in memory
  std::uint64_t failed = 0;   ///< erred or cancelled
  std::uint64_t pending = 0;  ///< not finished yet
  std::string client;         ///< the client attached to it ("" = detached: no client)
};

/// @brief A task of a job of shell commands (ShellJob::tasks).
struct ShellJobTask {
  std::uint64_t id = 0;       ///< its id in the job (array index, line number, job file's id)
  std::string name;           ///< a job file's name for it
  std::string state;          ///< waiting, running, ok, failed or cancelled
  int exit_code = 0;          ///< failed: the command's exit code (-1: none, e.g. time limit)
  std::string error;          ///< failed: why, with the last lines of its stderr
};

/// @brief A job of shell commands (`herd submit`): Client::shell_jobs(), `herd jobs`.
struct ShellJob {
  std::uint64_t id = 0;
  std::string name;
  std::string state;          ///< waiting, running, cancelling, finished, failed or cancelled
  std::uint64_t total = 0, waiting = 0, running = 0, ok = 0, failed = 0, cancelled = 0;
  std::int64_t submitted_ms = 0;  ///< unix milliseconds
  std::int64_t finished_ms = 0;   ///< unix milliseconds (0 = not finished)
  std::string command;
  std::vector<ShellJobTask> tasks;  ///< shell_job(): its failed tasks
  bool finished() const { return waiting == 0 && running == 0; }
};

/// @brief A snapshot of the scheduler: workers, tasks, throughput, pools and their jobs.
struct ClusterStatus {
  std::string scheduler_id;   ///< random id of the scheduler instance
  std::string address;        ///< where clients connect
  std::string dashboard;      ///< dashboard URL with its token, http://127.0.0.1:8787/?token=... ("" = none)
  bool auth_off = false;      ///< HERD_AUTH=off: the scheduler authenticates and encrypts nothing
  std::int64_t now_ms = 0;    ///< unix milliseconds of the snapshot
  double uptime_s = 0;        ///< seconds since the scheduler started
  int clients = 0;            ///< clients connected
  std::vector<WorkerInfo> workers;
  std::map<std::string, std::uint64_t> tasks;  ///< tasks in the graph by state (waiting, ready,
                                               ///< processing, memory, erred, cancelled, released)
  /// function -> state -> tasks in the graph, plus "finished_total" and "failed_total": the
  /// function's runs since the scheduler started (released tasks leave the graph, not these).
  std::map<std::string, std::map<std::string, std::uint64_t>> functions;
  std::uint64_t finished_total = 0;  ///< task runs that succeeded since the scheduler started
  std::uint64_t failed_total = 0;    ///< task runs that raised
  double throughput = 0;             ///< tasks finished per second over the last 10 s
  std::vector<PoolInfo> pools;
  std::vector<JobInfo> jobs;         ///< live jobs of every pool, and recently failed ones
  std::vector<TaskEventInfo> events; ///< newest task runs, oldest first
  /// The journal (`herd scheduler --journal`) in one line ("" = none): records, bytes on disk,
  /// or, while the disk refuses writes, how far behind it is and why. Results are delivered
  /// meanwhile; those not on disk would run again after a restart.
  std::string journal;
  bool journal_failing = false;      ///< the journal cannot write (disk full, I/O error)
  std::uint64_t journal_behind = 0;  ///< records not on disk yet
  std::vector<CampaignInfo> campaigns;  ///< detached campaigns, by name
  /// The scheduler's run record (`herd report --record FILE` reads it; "" = none).
  std::string record;

  /// @brief Human-readable tables (what `herd status` prints).
  std::string to_text() const;
  /// @brief One JSON object with every field above (what `herd status --json` prints).
  std::string to_json() const;
};

/// @brief Why a task is not running: `herd explain KEY`, Client::explain(future).
/// @code
/// std::cout << client.explain(future).to_text();
/// // task train-7 (function train): ready
/// //   ready: waiting for a free slot on one of the 2 worker(s) that can run it
/// //   worker 123_0: busy: 4 task(s) on 4 slot(s), or their resources in use
/// //   pool gpu: its workers can run it; 2 connected, 4 wanted, 2 job(s) pending (Slurm's reasons: Priority: 2)
/// @endcode
struct TaskExplanation {
  bool found = false;       ///< the scheduler knows the task
  std::string key;          ///< its key
  std::string function;     ///< its function
  std::string state;        ///< waiting, ready, processing, memory, erred, cancelled
  std::string summary;      ///< one line: where it runs, or why it does not
  std::vector<std::string> inputs;   ///< waiting: inputs not computed yet, "key (state)"
  std::vector<std::string> workers;  ///< ready: each connected worker, "name: why not there"
  std::vector<std::string> pools;    ///< ready: each pool, whether a worker it brings could run it
  bool never = false;       ///< no connected worker and no pool can ever run it
  std::map<std::string, double> resources;  ///< what it needs
  int duration_s = 0;       ///< its TaskOptions::duration (0 = none)
  /// @brief The explanation as `herd explain` prints it.
  std::string to_text() const;
};

/// @brief What Client::scale(), adapt(), pause_pool(), resume_pool() and retire_worker() changed,
/// as `herd scale` prints it: "pool gpu: 2 → 20 workers (18 jobs submitted)".
struct PoolChange {
  std::string pool;          ///< the pool changed ("" = a worker of no pool was retired)
  int before = 0;            ///< workers wanted before
  int after = 0;             ///< workers wanted now
  bool adaptive = false;     ///< now follows the backlog between minimum and maximum
  int minimum = 0, maximum = 0;
  int submitted = 0;         ///< jobs submitted for the change
  int retiring = 0;          ///< workers of the pool retiring now
  bool paused = false;       ///< paused by the user (no job is submitted until resumed)
  std::vector<std::string> kept_for_data;  ///< as PoolInfo::kept_for_data
  std::string worker;        ///< retire_worker(): the worker
  std::string note;          ///< retire_worker(): what becomes of its tasks and results
  /// @brief Lines as the shell commands print them.
  std::string to_text() const;
};

}  // namespace herd
