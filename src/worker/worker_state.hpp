// WorkerState: what a worker knows and decides, with no socket, no thread and no clock inside
// (as Dask's WorkerState beside its Worker). The worker process (worker.hpp) turns each
// message from the scheduler, each answer from a peer's data port and each finished task into
// an event here, then carries out the instructions the state leaves: fetch these inputs from
// these holders, start these tasks on executors, drop these results, report these to the
// scheduler.
//
// A task arrives (execute) with where each input lives. Inputs not held here are fetched, one
// request per holder for all the inputs wanted from it; a holder that does not answer, or no
// longer has it, is given up on for the next one; when none is left the task goes back to the
// scheduler as missing_input, naming the holders it could not reach. A task whose inputs are
// here is ready; ready tasks start when a thread and their resources (GPU devices included)
// are free, gang members first. Results stay in the store until the scheduler frees them.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "herd/detail/payload.hpp"
#include "protocol/messages.hpp"

namespace herd::worker {

using protocol::TaskId;
using detail::PayloadPtr;

/// Start this task now, on these GPU devices (indexes into the worker's device list).
struct Run {
  protocol::ExecuteTask task;
  std::vector<int> devices;
  std::vector<int> cores;  // CPU ids the task is pinned to (its cpus; empty: not pinned)
};

/// What the worker process must do after an event; cleared by the process once done.
struct WorkerInstructions {
  std::map<std::string, std::vector<TaskId>> fetch;  // holder's data port -> results to ask it for
  std::vector<Run> run;                              // start these on executors
  std::vector<TaskId> free;                          // drop these results from the store
  std::vector<protocol::TaskResult> results;         // report these to the scheduler
  std::vector<TaskId> acquired;                      // copies fetched, to report
  std::vector<protocol::DepLocation> acquire_failed;  // copies asked for that no holder gave
  std::vector<TaskId> seceded, rejoined;             // slots given back / taken again: report
  bool empty() const {
    return fetch.empty() && run.empty() && free.empty() && results.empty() && acquired.empty() &&
           acquire_failed.empty() && seceded.empty() && rejoined.empty();
  }
  void clear() {
    fetch.clear();
    run.clear();
    free.clear();
    results.clear();
    acquired.clear();
    acquire_failed.clear();
    seceded.clear();
    rejoined.clear();
  }
};

/// A task an executor finished (or could not run).
struct Completion {
  TaskId id = 0;
  bool ok = false;
  PayloadPtr bytes;              // the result, when ok (already in the store)
  protocol::ErrorInfo error;
  std::uint64_t duration_us = 0;
  bool missing_input = false;    // an input vanished before it ran
  bool preempted = false;        // failed while the worker drained (a preemption)
  std::uint32_t thread = 0;      // 0: the I/O thread (inline run), n: executor n
  std::uint64_t ended_us = 0;    // when the function returned (steady clock, microseconds): the
                                 //   shell turns it into TaskResult::return_us when it sends
};

struct WorkerStateOptions {
  std::string name;                         // for errors
  std::string data_address;                 // its own data port (never fetched from)
  std::uint32_t nthreads = 1;
  std::map<std::string, double> resources;  // offered (the "gpu" count included)
  std::size_t gpus = 0;                     // GPU devices it may hand out
  std::vector<int> cores;                   // CPU ids it hands out to tasks that ask for cpus
                                            //   (empty: it counts "cpus" but pins nothing)
  /// A result the journal wants whole (full_result) travels in the notice only up to this
  /// size (0 = no limit); a bigger one stays here like any other, so that no message goes
  /// over the scheduler's limit and the scheduler never holds it.
  std::uint64_t max_full_result_bytes = 0;
};

/// When the results of tasks that executors finished travel to the scheduler (pure: the time
/// is passed in). An executor that has another task waiting goes on with it instead of waiting
/// for the I/O thread, so a worker with a queue of short tasks would otherwise send one message
/// (and wake its I/O thread once) per task. The first result of a burst goes at once; those
/// that follow within `window` wait and go together when it has passed, or at once when the
/// executor runs out of tasks (the scheduler has more for it then). A lone task is reported at
/// once, as before.
class ResultBatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ResultBatch(std::chrono::microseconds window) : window_(window) {}
  /// An executor finished a task; `more`: another is waiting for it. True: wake the I/O thread.
  bool finished(Clock::time_point now, bool more) {
    if (!more || window_.count() <= 0) {
      requested_ = true;
      return true;
    }
    if (armed_) return false;  // within the window: it goes when the window has passed
    armed_ = true;
    due_ = now + window_;
    requested_ = true;  // the first of the burst: at once
    return true;
  }
  /// The I/O thread: send what is pending now.
  bool send_now(Clock::time_point now) const { return requested_ || (armed_ && now >= due_); }
  /// The I/O thread sent every pending result.
  void sent(Clock::time_point now) {
    requested_ = false;
    if (armed_ && now >= due_) armed_ = false;  // the next result starts a new burst
  }
  /// Until when the I/O thread may sleep with results pending (nullopt: no limit).
  std::optional<Clock::time_point> deadline() const {
    return armed_ ? std::optional<Clock::time_point>(due_) : std::nullopt;
  }

 private:
  std::chrono::microseconds window_;
  bool requested_ = false;  // send at the next turn
  bool armed_ = false;      // a burst's window is open until due_
  Clock::time_point due_{};
};

class WorkerState {
 public:
  explicit WorkerState(WorkerStateOptions options);
  /// The scheduler's message limit, once its hello reply told it.
  void set_max_full_result_bytes(std::uint64_t n) { options_.max_full_result_bytes = n; }

  /// The time of the events that follow (steady clock, microseconds), for the run record's
  /// fetch phase (TaskResult::fetch_us); the shell sets it once a turn.
  void set_clock(std::uint64_t steady_us) { now_us_ = steady_us; }

  // ---- from the scheduler ------------------------------------------------------------------
  void execute(std::vector<protocol::ExecuteTask>&& tasks);
  /// Hand back these tasks if they have not started (cancel, steal, retire).
  void cancel(const std::vector<TaskId>& ids);
  /// Stop waiting for a running task (its time limit, cancel(force)): it is reported failed
  /// with `error` now, its thread slot and resources are free; its completion, when it comes,
  /// must not reach finished(). Not running: handed back as by cancel(). True when it was running.
  bool abandon(TaskId id, protocol::ErrorInfo error);
  bool running(TaskId id) const { return running_.count(id) != 0; }
  std::string running_key(TaskId id) const {
    auto it = running_.find(id);
    return it == running_.end() ? std::string() : it->second.key;
  }
  void free_keys(const std::vector<TaskId>& ids);
  /// Fetch copies of these results (a retiring worker's, a replica).
  void acquire(const std::vector<protocol::DepLocation>& keys);
  /// Scattered data the scheduler sent is in the store.
  void put(TaskId id, std::uint64_t nbytes);
  /// Scattered data to fetch from `source` (the client's data port), reported as put() once it
  /// is here, or as a failed result (herd::ScatterSourceUnreachable) when it cannot be fetched.
  void put_from(TaskId id, const std::string& source);

  // ---- from peers' data ports ---------------------------------------------------------------
  /// `id` fetched from `address` is in the store.
  void fetched(const std::string& address, TaskId id, std::uint64_t nbytes);
  /// `address` says it does not hold `id`.
  void not_there(const std::string& address, TaskId id);
  /// Nothing came from `address` for these (timeout, connection, bad answer).
  void fetch_failed(const std::string& address, const std::vector<TaskId>& ids, const std::string& why);

  // ---- from the executors ------------------------------------------------------------------
  void finished(Completion c);
  /// A task the state started never reached an executor: it goes back to the scheduler.
  void not_started(TaskId id);
  /// The worker went over its memory limit: running tasks fail with `why`, the rest go back.
  void over_memory(const std::string& why);
  /// Memory is short and nothing more can be spilled: start nothing new until resumed (the
  /// running tasks go on; fetches and frees too). Paused, the ready tasks wait here.
  void pause(bool on);
  /// herd::secede() in running task `id`: it no longer holds a thread slot (the worker gives
  /// the slot an executor of its own), so the next ready task starts. False: not running.
  bool secede(TaskId id);
  /// herd::rejoin(): the seceded task `id` takes a slot again, now if one is free (true; it is
  /// in out().rejoined), else before any new task once one frees (it comes in out().rejoined
  /// then). Not seceded: true, nothing to do.
  bool rejoin(TaskId id);

  // ---- read access -------------------------------------------------------------------------
  bool holds(TaskId id) const { return stored_.count(id) != 0; }
  /// Received and not started (waiting for inputs or a thread): for `herd logs`.
  bool queued(TaskId id, const std::string& key) const;
  std::size_t executing() const { return running_.size(); }
  /// Running tasks that hold a thread slot (not seceded; a task holding cores holds none).
  std::size_t slots_used() const { return running_.size() - seceded_ - core_tasks_; }
  /// How many tasks holding cores (the resource "cpus") may run at once: one per core offered.
  std::size_t core_task_limit() const;
  /// CPU ids no running task holds (of WorkerStateOptions::cores).
  std::vector<int> free_cores() const;
  std::size_t stored() const { return stored_.size(); }
  std::uint64_t stored_bytes() const { return stored_bytes_; }
  std::size_t waiting_for_inputs() const { return pending_.size(); }
  std::size_t ready() const { return ready_.size(); }
  bool paused() const { return paused_; }
  WorkerInstructions& out() { return out_; }
  /// Checks the state's invariants; "" when all hold.
  std::string validate() const;

 private:
  struct Pending {
    protocol::ExecuteTask task;
    std::uint32_t missing = 0;  // inputs not here yet
    std::uint64_t arrived_us = 0;  // set_clock's time when it came
  };
  struct Fetched {  // what a task's inputs cost to fetch, until its result reports it
    std::uint64_t us = 0, bytes = 0;
    std::uint32_t peers = 0;
  };
  struct Wanted {  // an input being fetched
    std::vector<std::string> holders;  // where it is, in the order to try
    std::size_t next = 0;              // the holder asked now is holders[next - 1]
    std::vector<TaskId> tasks;         // tasks waiting for it (none for an acquire)
    bool acquire = false;              // a copy the scheduler asked for: report it
    bool put = false;                  // a scattered value: report it as a task result
    std::vector<std::string> unreachable, not_held;  // what the holders tried said
  };
  struct Running {
    std::string key;
    std::map<std::string, double> resources;
    std::vector<int> devices;
    double gpu_share = 0;       // taken from each of its devices
    bool full_result = false;   // the scheduler keeps the whole result (journal)
    bool seceded = false;       // herd::secede(): holds no thread slot
    bool holds_cores = false;   // asked for cpus: holds cores, not a thread slot
    std::vector<std::size_t> cores;  // indexes into options_.cores it is pinned to
  };

  void grant_rejoins();
  void forget_seceded(TaskId id, const Running& r);
  void fetch_next(TaskId dep);
  void input_arrived(TaskId dep);
  void input_unavailable(TaskId dep);
  void make_ready(protocol::ExecuteTask&& task);
  void start_ready();
  std::vector<int> pick_gpus(double need) const;
  std::vector<std::size_t> pick_cores(double need) const;
  void release(const Running& r);  // its resources, devices and cores are free again
  void hand_back(TaskId id);
  void check() const;

  WorkerStateOptions options_;
  std::unordered_map<TaskId, Pending> pending_;   // waiting for inputs
  std::unordered_map<TaskId, Wanted> wanted_;     // inputs being fetched
  std::deque<protocol::ExecuteTask> ready_;       // inputs here, waiting for a thread/resources
  std::unordered_map<TaskId, Running> running_;   // on an executor
  std::size_t seceded_ = 0;                       // of running_, those that hold no slot
  std::deque<TaskId> rejoining_;                  // seceded, waiting for a slot to rejoin
  std::unordered_map<TaskId, std::uint64_t> stored_;  // results in the store -> size
  std::uint64_t stored_bytes_ = 0;
  std::map<std::string, double> free_resources_;
  std::vector<double> gpu_free_;                  // by device: 1 = free, 0 = taken
  std::vector<bool> core_free_;                   // by index of options_.cores
  std::size_t core_tasks_ = 0;                    // of running_, those holding cores
  std::size_t ready_cores_ = 0;                   // of ready_, those asking for cores
  WorkerInstructions out_;
  bool paused_ = false;                           // pause(): start nothing new
  std::uint64_t now_us_ = 0;                      // set_clock()
  std::unordered_map<TaskId, Fetched> fetched_;   // tasks that fetched inputs, until reported
};

}  // namespace herd::worker
