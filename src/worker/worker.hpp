// A worker process: the IO around WorkerState (worker_state.hpp). One I/O thread owns the
// scheduler DEALER, the data-port ROUTER (serving results to peers and clients), the
// DataClient (fetching inputs from peers) and the state; a pool of executor threads runs the
// tasks the state starts. The state is the I/O thread's between two polls (state_mu_); an
// executor that finishes a task takes it too, for a moment: it tells the state, takes the next
// task the state starts and goes on, without a round trip through the I/O thread per task.
// Its results reach the scheduler in batches: the first of a burst at once, the rest at most
// HERD_RESULT_BATCH_US later or when the executor runs out of work (an eventfd wakes the I/O
// thread).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "collective/gang_runtime.hpp"
#include "common/config.hpp"
#include "net/channel.hpp"
#include "net/data_port.hpp"
#include "common/security.hpp"
#include "gpu/gpu.hpp"
#include "protocol/codec.hpp"
#include "worker/data_store.hpp"
#include "worker/inline_policy.hpp"
#include "worker/isolated.hpp"
#include "worker/worker_state.hpp"
#include "worker/worker_internal.hpp"

namespace herd::worker {

struct WorkerOptions {
  std::string scheduler;                    // scheduler address, e.g. tcp://127.0.0.1:40000
  std::string name;                         // "" = host:pid
  std::uint32_t nthreads = 1;               // task slots
  std::uint32_t cpus = 0;                   // cores it offers (resource "cpus"; 0 = its allocation's)
  std::map<std::string, double> resources;  // custom resources it offers
  std::string listen_host;                  // host/address (or interface) every listener binds
                                            //   ("" = the one that routes to the scheduler)
  std::string interface;                    // network interface every listener binds, e.g. ib0
  std::vector<std::string> load;            // task libraries to dlopen
  std::uint64_t memory_limit = 0;           // bytes of RSS (0 = Slurm's job memory, or none)
  std::string local_directory;              // where results spill ("" = $SLURM_TMPDIR, else the
                                            //   system's temporary directory); a private
                                            //   directory is made inside and removed on leaving
  Config config = Config::from_env();
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  /// Connects, registers, serves until the scheduler says stop or is lost. Exit code. Returns
  /// on the thread that ends the loop: this one, or after a relief (relief_watch) another one,
  /// which ends the process itself (leave_process).
  int run();
  /// Stops every worker of this process (a signal handler may call it: it sets a flag).
  static void request_stop();
  /// SIGTERM / walltime warning: drain (the first time), leave at once (the second time).
  static void request_drain();
  /// Removes what the worker wrote to its local directory (spilled results). On leaving.
  void remove_local_files() { store_.remove_spill_directory(); }

 private:
  using Clock = std::chrono::steady_clock;

  bool connect();
  void executor_loop();
  /// Stops waiting for running task `id` (time limit, cancel(force)): reported failed with
  /// `error`, its slot given to a new executor thread, its thread left to end on its own (a
  /// shell command is killed, an isolated task's child process too; a gang member's collective
  /// operations are aborted), its result discarded. False when it is not running here.
  bool abandon(protocol::TaskId id, protocol::ErrorInfo error);
  void check_deadlines(Clock::time_point now);
  /// `child`: for an isolated task (TaskOptions::isolated), the child process it runs in.
  Completion execute(const protocol::ExecuteTask& task, const std::vector<int>& devices, IsolatedChild* child,
                     const std::vector<int>& cores = {});
  /// An isolated task's outcome as its completion (TaskCrashed for a child that died).
  void isolated_completion(const protocol::ExecuteTask& task, IsolatedOutcome& o, Completion& c);
  /// Joins executor threads that ended (seceded or abandoned tasks'); run_mu_ held.
  void join_ended_locked();
  void on_scheduler_message(protocol::Received& msg, bool& shutdown);
  void on_execute(protocol::ExecuteTasksEvent& ev);
  /// `herd logs`: answers the scheduler with this worker's log or a task's output.
  void on_logs_fetch(const protocol::LogsRequest& req);
  bool queued_locked(protocol::TaskId id, const std::string& key);  // received, not started; run_mu_ held
  void on_gang_message(protocol::MessageType type, protocol::Received& msg);
  /// Carries out what the state decided: fetches, tasks to start, results to free and report.
  void carry_out();
  void drain_completions();
  void on_retiring(const protocol::RetiringEvent& ev);  // the scheduler retires this worker
  void wake_io();  // any thread: the I/O thread leaves its poll and drains completions
  void memory_monitor();
  /// Pauses (or resumes) by resident memory against the pause share of the limit; any thread.
  void update_pause();
  /// Results in memory past the target share of the limit go to disk (after each put).
  void spill_to_target();
  /// Makes the private spill directory under the local directory (a memory limit only).
  void make_spill_directory();
  void over_memory_limit(std::uint64_t rss);
  void flush_results();
  /// An executor's end of a task (not a seceded one): the state hears of it under state_mu_,
  /// the tasks it starts go to the executors, its result waits for the next batch.
  /// `takes_next`: this executor takes one of the runs it starts itself (not a relieved I/O
  /// thread: run_inline).
  void finish_on_executor(Completion c, const std::string& function, bool takes_next = true);
  /// Takes the one run of this turn when it may go on the I/O thread itself (inline_policy_
  /// decides); state_mu_ held.
  std::optional<Run> take_inline_run_locked(WorkerInstructions& out);
  /// Runs it here, as an executor would, with the state let go meanwhile (`turn`), and tells
  /// the state (its result and next runs go into the state's instructions). False when it ran
  /// so long that another thread took the loop meanwhile (relief_watch): the task was finished
  /// as an executor finishes one, and `turn` is not held.
  bool run_inline(Run run, std::unique_lock<std::mutex>& turn);
  /// The I/O thread's loop: sockets, the state's turns, heartbeats. Exit code. `relieved`: the
  /// function whose blocked run this thread took the loop from (relief_watch), or empty.
  int io_loop(const std::string& relieved);
  /// A task of a function that was quick until now, then blocks (a cache miss, a slow file
  /// system): on the I/O thread it would stop heartbeats, the data port and every other slot,
  /// and past HERD_TIMEOUT_MS the scheduler would count the worker lost and run its tasks again.
  /// This thread looks every ReliefPolicy::kLookEvery; when relief_ says so, a fresh thread takes
  /// the loop, and the run's own thread ends the task as an executor would.
  void relief_watch();
  /// Moves the runs the state started to the executors' queue, with their time limits, and
  /// wakes executors for them (`self`: but one, the calling executor takes one itself);
  /// state_mu_ held. True when that queue is not empty afterwards.
  bool hand_off_runs_locked(WorkerInstructions& out, Clock::time_point now, bool self);
  /// Says goodbye and waits (bounded) for the scheduler's acknowledgement.
  void goodbye(const std::string& reason);
  std::uint64_t rss_bytes() const;

  WorkerOptions options_;
  zmq::context_t context_{1};
  security::Auth auth_;  // before the sockets: the data port is a CURVE server
  zmq::socket_t sched_;
  // How messages travel to and from the scheduler (its DEALER, and the control link once up);
  // protocol::send's sink.
  std::unique_ptr<net::WorkerChannels> channels_;
  std::vector<protocol::Received> from_scheduler_;  // one turn's messages
  std::unique_ptr<net::DataServer> data_;  // the data port, with its lanes (net/data_port.hpp)
  int wake_fd_ = -1;  // eventfd: "look at the completion queue" (wake_io), polled by run()
  std::string data_address_;
  DataStore store_;
  // The state, and what goes with it (deadlines_, the results to send): the I/O thread holds
  // state_mu_ for each turn of its loop, an executor for the end of each task.
  std::mutex state_mu_;
  std::unique_ptr<WorkerState> state_;
  std::unique_ptr<net::DataClient> fetcher_;
  net::DataEvents fetch_events_;

  // Executors take Runs from here (the state only starts what a free thread can run).
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  std::deque<Run> handoff_;
  bool stopping_ = false;
  std::vector<gpu::Device> gpus_;    // devices this worker may use
  std::vector<int> cores_;           // CPU ids of its mask it pins tasks to (empty: no pinning)
  std::atomic<std::uint64_t> over_limit_rss_{0};     // set by the monitor: RSS past the limit
  std::atomic<bool> pause_{false};                   // set by the monitor: past the pause share
  std::mutex pause_mu_;
  std::string pause_reason_;                         // under pause_mu_: for heartbeats, status
  std::thread monitor_;
  std::vector<std::thread> executors_;
  // Tasks on an executor now -> that executor's "abandoned" flag and thread (under run_mu_).
  struct OnExecutor {
    std::shared_ptr<std::atomic<bool>> abandoned;
    std::thread::id thread;
    std::shared_ptr<IsolatedChild> child;  // an isolated task's process (killed when abandoned)
    protocol::TaskId gang = 0;             // a gang member's gang and attempt (aborted when abandoned)
    std::uint32_t gang_attempt = 0;
  };
  std::map<protocol::TaskId, OnExecutor> on_executor_;
  std::vector<std::thread::id> abandoned_threads_;  // under run_mu_: not joined, they may never end
  std::map<protocol::TaskId, std::pair<Clock::time_point, std::uint32_t>> deadlines_;  // time limits (state_mu_)
  std::mutex done_mu_;
  std::vector<Completion> done_;
  std::vector<protocol::GangJoinRequest> gang_joins_;  // from members, for the I/O thread
  // herd::secede() / rejoin() from task threads, for the I/O thread (under done_mu_); a rejoin
  // carries what its task thread waits on until the state grants it a slot.
  struct SecedeCall {
    protocol::TaskId id = 0;
    std::shared_ptr<std::promise<void>> rejoined;  // null: secede
  };
  std::vector<SecedeCall> secede_calls_;
  std::vector<std::string> seceded_functions_;  // under done_mu_: ran past a secede (never inline)
  std::map<protocol::TaskId, std::shared_ptr<std::promise<void>>> rejoin_waiters_;  // I/O thread
  std::atomic<bool> io_gone_{false};           // the I/O thread answers no rejoin any more
  std::vector<std::thread::id> ended_threads_;  // under run_mu_: executors that returned (seceded, abandoned)
  /// Task threads: give the slot back (a new executor takes it) / wait for one again.
  void secede_task(protocol::TaskId id);
  void rejoin_task(protocol::TaskId id);
  void release_rejoin_waiters();

  // Gang members on this worker: (gang, attempt) -> mailbox (made when the task arrives, so an
  // abort that comes before the member starts is kept).
  std::mutex gang_mu_;
  std::map<std::pair<protocol::TaskId, std::uint32_t>, std::shared_ptr<collective::GangSession>> gangs_;
  std::string ring_host_;  // where gang members' ring listeners bind

  // Under state_mu_.
  // Which task runs on the I/O thread (run_inline), from its function's run times: a round trip
  // of a tiny task then has no thread hand-off in the worker (inline_policy.hpp).
  InlinePolicy inline_policy_{options_.config.inline_us};
  std::optional<Run> inline_next_;  // the run this turn gives the I/O thread, at the turn's end
  // The inline run whose log bookkeeping (LogBook::task_finished: a flush, a poll(2) of the
  // capture pipes) waits until its result is sent, off the round trip's path; 0 when none.
  // Still within the turn, so a logs query (a later turn) sees the task's output complete.
  protocol::TaskId inline_log_open_ = 0;
  // The data port's socket had nothing queued when last asked (ZMQ_EVENTS) and nothing has
  // touched it since: the next turn polls its descriptor alone, without asking again.
  bool data_quiet_ = false;

  // The run on the I/O thread now, and whether relief_watch hands the loop to a fresh thread
  // (relief_ under relief_mu_).
  std::mutex relief_mu_;
  ReliefPolicy relief_;
  std::vector<protocol::TaskResult> results_out_;
  std::vector<protocol::TaskResult> exec_results_;  // finished by executors, not sent yet
  protocol::ExecuteTasksEvent execute_in_;           // the I/O thread's: execute_tasks decoded
  ResultBatch batch_;                                // when they go
  CpuMeter cpu_;                                     // the heartbeat's CPU share
  std::vector<protocol::TaskId> acquired_out_;
  std::vector<protocol::DepLocation> acquire_failed_out_;
  Clock::time_point last_from_scheduler_;
  std::int64_t end_time_ = 0;           // unix seconds when the batch job ends (0 = never)
  std::int64_t retire_before_s_ = 60;   // ask to retire this long before end_time_
  bool retire_asked_ = false;
  bool draining_ = false;               // a drain signal came: leave by drain_deadline_
  Clock::time_point drain_deadline_{};
  Clock::time_point last_heartbeat_{};
};

int run_worker(WorkerOptions options);
/// The end of a worker process, from the thread whose loop ended (Worker::run): its isolated
/// children killed, its spilled results removed, its output flushed, then _exit.
[[noreturn]] void leave_process(Worker& w, int rc);

}  // namespace herd::worker
