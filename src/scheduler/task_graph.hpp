// The scheduler's task graph: task states and their transitions, with no sockets, no clock and
// no workers' details in sight. Every transition reports what the rest of the scheduler state
// must act on in an Effects record (tasks to place, clients to tell, results to free, tasks to
// stop); unit tests read the same record.
//
// States (a closed enum; TaskGraph::set() checks every move against kLegal below), as in Dask:
//   waiting    an input is not in memory              -> ready when all are
//   ready      inputs in memory, no worker has it     -> processing when placed
//   processing sent to a worker                       -> memory | erred | ready (worker lost)
//   memory     result held on >= 1 worker             -> released (nobody needs the data) |
//                                                        waiting/ready (all holders lost: lineage)
//   erred      failed (or an input failed)            -> forgotten when released
//   cancelled  cancelled by the client
//   released   data freed, recipe kept because a dependent may need it recomputed
//
// Who needs a task: the client (it holds a future: `wanted`), unfinished dependents
// (`waiters`, they need its data) and any dependent still in the graph (`dependents`, they may
// need its recipe). A task nobody needs is forgotten.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/messages.hpp"
#include "scheduler/small_vec.hpp"
#include "scheduler/task_table.hpp"

namespace herd::scheduler {

using protocol::TaskId;
inline constexpr std::uint32_t kNoWorker = 0xffffffffu;

enum class TaskStatus : std::uint8_t { waiting, ready, processing, memory, erred, cancelled, released };
inline constexpr int kTaskStatusCount = 7;
const char* to_string(TaskStatus s);
/// The wire state a client sees (released is internal: it never reaches a client).
protocol::TaskState wire_state(TaskStatus s);

/// kLegal[from][to]: the moves the graph may make. Anything else is a bug in the scheduler.
inline constexpr bool kLegal[kTaskStatusCount][kTaskStatusCount] = {
    //            waiting ready  proc   memory erred  cancel released
    /* waiting */ {true, true, true, false, true, true, false},  // proc: journaled result scattered
    /* ready   */ {true, true, true, false, true, true, false},
    /* proc    */ {true, true, false, true, true, true, true},   // released: nobody wanted it any more
    /* memory  */ {true, true, false, false, false, false, true},  // waiting/ready: all holders lost
    /* erred   */ {false, false, false, false, false, false, false},
    /* cancel  */ {false, false, false, false, false, false, false},
    /* released*/ {true, true, false, false, true, false, false},  // erred: scattered data lost
};

struct Task {
  // Hot fields first; 240 bytes in all, 32 of them the run record's times at the end (the key
  // lives in TaskGraph's key table, lists of one or two ids inside the record), so that the
  // simulated core's millions of tasks stay in cache.
  TaskId id = 0;
  std::uint64_t seq = 0;          // submission order
  std::uint64_t nbytes = 0;
  TaskId gang = 0;                // gang id (0 = not a gang member); the gang keeps the retries
  std::uint32_t function = 0;     // index into TaskGraph's function names
  std::uint32_t client = 0;       // owning client index
  std::uint32_t worker = kNoWorker;  // processing on
  std::uint32_t waiting_on = 0;   // inputs not in memory
  std::uint32_t waiters = 0;      // dependents not finished
  std::uint32_t retries_left = 0;
  std::uint32_t deaths = 0;       // workers lost while it was processing
  std::int32_t priority = 0;
  std::uint32_t duration_s = 0;   // declared run time (placement near walltime)
  std::uint32_t timeout_ms = 0;   // time limit of one run (the worker enforces it; 0 = none)
  std::uint32_t gang_rank = 0;
  std::uint16_t shape = 0;        // resources it needs (SchedulerState's shape table; 0 = none)
  TaskStatus status = TaskStatus::waiting;
  bool wanted = false;            // the client holds a future
  bool scattered = false;         // data without a recipe
  bool keyed = false;             // the client named it (TaskOptions::key): journaled
  bool named = false;             // has a key of its own (keyed, or a named scatter): TaskGraph::user_key
  bool forget_when_done = false;  // nobody needs it any more, but a worker is computing it
  bool no_worker_noted = false;   // its client was told no worker can run it (TaskState::no_worker)
  bool stealing = false;          // asked back from its worker to run elsewhere (work stealing)
  bool fire_and_forget = false;   // runs to its end even when no client wants it (then forgotten)
  bool campaign = false;          // in a detached campaign: its client's release is ignored
                                  //   (SchedulerState::release_campaign() lets it go)
  bool job = false;               // a task of a job of shell commands (state_jobs.cpp)
  bool isolated = false;          // runs in a child process of its worker (TaskOptions::isolated;
                                  //   a memory cap, if any, in TaskGraph's side table)
  bool client_has = false;        // its client holds the value (it came inline with the update)
  SmallVec<char, 16> args;             // msgpack; inside the record up to 16 bytes
  SmallVec<protocol::ArgRef, 1> refs;
  SmallVec<TaskId, 2> deps;        // distinct inputs
  SmallVec<TaskId, 1> dependents;  // tasks in the graph that take this one as input
  SmallVec<std::uint32_t, 2> who_has;
  std::unique_ptr<protocol::ErrorInfo> error;
  // For the run record (SchedulerState::set_clock's time, unix microseconds; 0 = unknown).
  std::int64_t submitted_us = 0, ready_us = 0, placed_us = 0;
  std::uint32_t runs_ended = 0;    // runs that ended (retries, re-runs after a lost worker)

  bool in_memory() const { return status == TaskStatus::memory; }
  /// No worker needs to keep this result: its client already holds the value, and it has a
  /// recipe to compute it again should a task ever take it as input (none waits for it now).
  bool safe_elsewhere() const { return client_has && !scattered && !campaign && gang == 0 && waiters == 0; }
  bool unfinished() const {
    return status == TaskStatus::waiting || status == TaskStatus::ready || status == TaskStatus::processing;
  }
};

struct Effects {
  std::vector<TaskId> ready;      // became ready: place them
  std::vector<TaskId> notify;     // reached memory/erred/cancelled and the client wants to know
  std::vector<std::pair<std::uint32_t, TaskId>> free;    // (worker, task): drop the data
  std::vector<std::pair<std::uint32_t, TaskId>> cancel;  // (worker, task): stop if not started
  void clear() {
    ready.clear();
    notify.clear();
    free.clear();
    cancel.clear();
  }
  bool empty() const { return ready.empty() && notify.empty() && free.empty() && cancel.empty(); }
};

class TaskGraph {
 public:
  /// Adds a task needing resource shape `shape`. Unknown inputs fail it at once (the client
  /// released them, or never sent them).
  void add(const protocol::TaskSpec& spec, std::uint32_t client, std::uint16_t shape, Effects& fx);
  /// A scattered value: `waiting` until it is sent to a worker (started()), then `processing`
  /// until the worker confirms it holds it (finished()), so tasks submitted right after the
  /// scatter can depend on it.
  void add_scattered(TaskId id, std::string key, std::uint32_t client);

  void started(TaskId id, std::uint32_t worker);
  void finished(TaskId id, std::uint32_t worker, std::uint64_t nbytes, Effects& fx);
  /// The task raised; retries it if it has retries left (returns true), else fails it and
  /// everything downstream. `preempted`: it failed while its worker drained; a checkpointable
  /// task spends its preemptions then, not its retries, and the error says which ran out.
  bool failed(TaskId id, protocol::ErrorInfo error, Effects& fx, bool preempted = false);
  /// The worker could not get an input: back to ready / waiting, inputs recomputed if lost.
  void input_missing(TaskId id, Effects& fx);
  /// `worker` now also holds `id` (it fetched it for a task).
  void add_holder(TaskId id, std::uint32_t worker);
  /// `worker` no longer holds `id` (it lost the copy, or it was freed there).
  void remove_holder(TaskId id, std::uint32_t worker, Effects& fx);
  /// The client dropped its last future.
  void release(TaskId id, Effects& fx);
  void cancel(TaskId id, Effects& fx);
  /// The worker is gone: its tasks go back to ready, its results are recomputed if needed.
  /// A task present at more than `allowed_failures` losses fails instead (KilledWorker).
  /// `count_deaths` is false for a worker that was retired on purpose (its tasks did nothing
  /// wrong).
  void worker_lost(std::uint32_t worker, const std::vector<TaskId>& processing,
                   const std::vector<TaskId>& held, std::uint32_t allowed_failures, Effects& fx,
                   bool count_deaths = true, const std::string& worker_name = "");
  /// Fails an unfinished task (any state) and everything downstream, retries or not.
  void fail(TaskId id, const protocol::ErrorInfo& error, Effects& fx);
  /// Back to ready after being handed back by a worker (not a failure).
  void requeue(TaskId id, Effects& fx);
  /// A scattered value the worker could not fetch: waiting again, for its bytes to come.
  void unstart(TaskId id);
  /// Client::restart(): every task forgotten at once, with no effects (the caller tells the
  /// clients and the workers). Function names stay: the run history refers to them.
  void clear();

  Task* find(TaskId id) { return tasks_.find(id); }
  const Task* find(TaskId id) const { return tasks_.find(id); }
  std::size_t size() const { return tasks_.size(); }
  /// Tasks in state `s` (kept as counters, not counted).
  std::size_t count(TaskStatus s) const { return counts_[static_cast<int>(s)]; }
  /// Ready tasks of resource shape `shape`, and ready + processing ones (a pool's demand).
  std::size_t ready_of_shape(std::uint16_t shape) const { return shape < by_shape_.size() ? by_shape_[shape].ready : 0; }
  std::size_t active_of_shape(std::uint16_t shape) const {
    return shape < by_shape_.size() ? by_shape_[shape].ready + by_shape_[shape].processing : 0;
  }
  /// Every task, as (id, task) pairs: `for (const auto& [id, t] : graph.tasks())`.
  using Tasks = SlotTable<Task, TaskId>;
  const Tasks& tasks() const { return tasks_; }

  const std::string& function_name(const Task& t) const { return functions_[t.function]; }
  /// The key the client gave it ("" = none).
  const std::string& user_key(const Task& t) const;
  const std::string& function_name(std::uint32_t index) const { return functions_[index]; }
  /// The user's key, else "<function>-<id in hex>".
  std::string key_of(const Task& t) const;
  static std::string display_key(const std::string& function, TaskId id);
  /// An isolated task's memory cap in bytes (TaskOptions::isolated_memory; 0 = none).
  std::uint64_t isolated_memory(const Task& t) const;

  /// Illegal transitions seen (each is also logged); with `strict` they throw std::logic_error.
  std::uint64_t illegal_transitions() const { return illegal_; }
  void set_strict(bool strict) { strict_ = strict; }
  /// Checks the graph's own invariants (edges both ways, waiter and waiting counts, state
  /// counters); returns the first broken one, "" when all hold. O(tasks + edges).
  std::string validate() const;

 private:
  void set(Task& t, TaskStatus to);
  [[gnu::cold]] void illegal(const Task& t, TaskStatus to);
  void fail_with(Task& t, const protocol::ErrorInfo& error, TaskStatus status, Effects& fx);
  void became_memory(Task& t, Effects& fx);
  void make_runnable(Task& t, Effects& fx);  // waiting or ready depending on inputs
  void ensure_data(Task& t, Effects& fx);    // lineage: bring a released/lost input back
  void maybe_forget(Task& t, Effects& fx);
  void free_data(Task& t, Effects& fx);
  void erase(Task& t);
  std::uint32_t intern_function(const std::string& name);

  Tasks tasks_;
  std::uint64_t next_seq_ = 0;
  void count_in(const Task& t, int delta);
  std::size_t counts_[kTaskStatusCount] = {};
  struct ShapeCounts {
    std::size_t ready = 0, processing = 0;
  };
  std::vector<ShapeCounts> by_shape_;
  std::unordered_map<TaskId, std::string> death_workers_;  // workers lost under a task, for its error
  std::unordered_map<TaskId, std::string> keys_;  // user keys of the tasks that have one (Task::named)
  // Memory caps of the isolated tasks that have one: rare, so out of the 200-byte record.
  std::unordered_map<TaskId, std::uint64_t> isolated_memory_;
  // Checkpointable tasks (TaskSpec::preemptions > 0): their two budgets, apart (few tasks).
  struct Budget {
    std::uint32_t preemptions = 0, preemptions_left = 0, preempted = 0;
    std::uint32_t retries = 0, failures = 0;
  };
  std::unordered_map<TaskId, Budget> budgets_;
  std::vector<std::string> functions_;
  std::unordered_map<std::string, std::uint32_t> function_index_;
  std::uint32_t last_function_ = ~0u;  // intern_function's last answer
  std::uint64_t illegal_ = 0;
  bool strict_ = false;
  std::vector<TaskId> forget_work_, ensure_stack_;  // maybe_forget's and ensure_data's work lists
};

}  // namespace herd::scheduler
